"""Our multiple_choice, instruction_following and judge environments for the side-by-side tests: each one's stack
(its shipped config, the scripted policy of the judge tests, for the judge also the scripted judge), its agent, and
input rows whose answers the scripted policy is told (`[say: X]`), with the reward each should get."""

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import orjson
import yaml

from nemo_gym.resources_servers.judge.tests import judge_stack
from tests.helpers.stack import Stack, environment_config, running_stack

ENVIRONMENTS = ("multiple_choice", "instruction_following", "judge")
OPTIONS = [{"A": "Paris"}, {"B": "Rome"}, {"C": "Oslo"}, {"D": "Lima"}]


def _say(text: str) -> dict:
    return {"input": [{"role": "user", "content": f"Answer the question. [say: {text}]"}]}


def write_rows(name: str, path: Path) -> Path:
    """Rows for environment `name`, a mix of rewards 0 and 1 (and, for the judge in its faulty state, judge
    failures)."""
    if name == "judge":
        return judge_stack.write_rows(path)
    if name == "multiple_choice":
        rows = [{"responses_create_params": _say(say), "options": OPTIONS, "expected_answer": expected}
                for say, expected in (("B", "B"), ("Answer: C", "C"), ("Rome", "D"), ("no clue", "A"))]
    else:
        calm = (["keywords:existence", "punctuation:no_comma"], [{"keywords": ["sea"]}, {}])
        rows = [{"responses_create_params": _say(say), "instruction_id_list": ids, "kwargs": kwargs}
                for say, (ids, kwargs) in (("the sea is calm and the river runs",  # English, as langdetect reads it
                                            (["change_case:english_lowercase"], [{}])),
                                           ("Loud", (["change_case:english_lowercase"], [{}])),
                                           ("The sea is calm", calm), ("The sea, calm", calm))]
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def agent_of(name: str) -> str:
    return f"{name}_simple_agent"


@contextmanager
def environment_stack(name: str, workdir: Path) -> Iterator[Stack]:
    """ng_run of environment `name` with the scripted policy (and the scripted judge, faulty: some judge calls fail)."""
    if name == "judge":
        state = workdir / "judge_state"
        state.write_text("faulty")
        with judge_stack.judge_stack(workdir, state) as stack:
            yield stack
        return
    policy = {"policy_model": {"responses_api_models": {"scripted_policy": {
        "entrypoint": str(judge_stack.TESTS_DIR / "scripted_policy.py")}}}}
    overrides = workdir / "policy.yaml"
    overrides.write_text(yaml.safe_dump(policy))
    args = [f"+config_paths=[{environment_config(name)},{overrides}]", f"+log_dir={workdir / 'ng_logs'}"]
    with running_stack(args, cwd=workdir) as stack:
        yield stack

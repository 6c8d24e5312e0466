"""multiple_choice, instruction_following and judge from one ng_e2e_collect_rollouts on the bundled SmolLM2-135M
served by a real vLLM, which is the policy and, through a model server of its own, the judge.

A 135M judge almost never writes the shipped prompt's [[A=B]] / [[A!=B]], so it is asked as the judge benchmark
asks it, for Yes or No (benchmarks/judge/config.yaml), which it writes. Every rollout must end scored or as a
recorded judge_error failure quoting the judge's answer, nothing else may fail, and most judged rollouts must be
scored from verdicts that parsed: a run where the judge's verdicts do not parse fails here.
"""

from pathlib import Path

import orjson
import pytest
import yaml

from nemo_gym.failures import FailureClass
from nemo_gym.resources_servers.judge.tests.judge_stack import verdicts
from nemo_gym.server.supervisor import free_port
from tests.collection.util import read_rows, run_cli, sidecar
from tests.helpers.stack import REPO_ROOT, environment_config

JUDGE_MODEL = REPO_ROOT / "nemo_gym" / "resources_servers" / "judge" / "configs" / "judge_model.yaml"
JUDGE_BENCHMARK = REPO_ROOT / "benchmarks" / "judge" / "config.yaml"
ENVIRONMENTS = ("multiple_choice", "instruction_following", "judge")
SMALL_JUDGE_SETTINGS = ("prompt_template", "positive_label", "negative_label")
# Of the judged rollouts, the share scored from verdicts that parsed: 28 of 30 (0.93) on vLLM's CPU build; 0 of 30
# with the shipped [[A=B]] prompt, with which this test used to pass.
MIN_PARSED_SHARE = 0.8


def _small_judge(path: Path) -> Path:
    """An overrides file asking the judge as the judge benchmark asks the bundled model."""
    benchmark = yaml.safe_load(JUDGE_BENCHMARK.read_text())["judge_resources_server"]["resources_servers"]["judge"]
    settings = {key: benchmark[key] for key in SMALL_JUDGE_SETTINGS}
    path.write_text(yaml.safe_dump({"judge_resources_server": {"resources_servers": {"judge": settings}}}))
    return path


def _keys(rows: list[dict]) -> list[tuple[int, int]]:
    return [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in rows]


@pytest.mark.vllm
def test_the_three_environments_run_end_to_end_on_the_bundled_model(vllm_server, tmp_path: Path) -> None:
    configs = ",".join([*(str(environment_config(name)) for name in ENVIRONMENTS), str(JUDGE_MODEL),
                        str(_small_judge(tmp_path / "small_judge.yaml")),
                        str(REPO_ROOT / "configs" / "vllm_model.yaml")])
    model = [f"+{role}_{key}={value}" for role in ("policy", "judge")
             for key, value in (("base_url", vllm_server.base_url), ("api_key", "EMPTY"),
                                ("model_name", vllm_server.model))]
    out = tmp_path / "out" / "rollouts.jsonl"
    result = run_cli("e2e", [
        f"+config_paths=[{configs}]", *model, "+split=example", f"+output_jsonl_fpath={out}",
        "+responses_create_params.temperature=0.0", "+responses_create_params.max_output_tokens=48",
        "+judge_resources_server.resources_servers.judge.judge_create_params.max_output_tokens=32",
        "+num_samples_in_parallel=16", f"+head_server.port={free_port()}", f"+log_dir={tmp_path / 'logs'}",
    ], REPO_ROOT, timeout=900)
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]

    rows = read_rows(out)
    failures = read_rows(sidecar(out, "_failures.jsonl")) if sidecar(out, "_failures.jsonl").exists() else []
    assert (result.returncode == 1) == bool(failures)
    inputs = read_rows(sidecar(out, "_materialized_inputs.jsonl"))
    assert sorted(_keys(rows) + _keys(failures)) == sorted(_keys(inputs))  # every rollout once, one way or the other
    for record in failures:  # only the judge fails, each failure recorded with its real rollout and no reward
        assert record["agent_ref"]["name"] == "judge_simple_agent"
        assert record["failure_class"] == FailureClass.JUDGE_ERROR
        assert record["rollout"]["response"]["output"] and "reward" not in record["rollout"]
        assert "the judge gave no verdict" in record["last_error"]

    by_agent = {name: [row for row in rows if row["agent_ref"]["name"] == f"{name}_simple_agent"]
                for name in ENVIRONMENTS}
    assert len(by_agent["multiple_choice"]) == 40 and len(by_agent["instruction_following"]) == 40
    assert all(row["reward"] in (0.0, 1.0) and row["response"]["output"] for row in rows)
    for row in by_agent["judge"]:  # scored from two verdicts the real judge wrote
        assert [e["order"] for e in row["judge_evaluations"]] == ["expected_first", "answer_first"] or \
            row.get("judge_skipped")
        assert all(e["text"] for e in row["judge_evaluations"])
    judged = verdicts(rows, failures)
    # The judge answered for most judge rollouts (the others are answers scored 0 without a call).
    answered = judged.parsed + judged.no_verdict
    assert judged.call_failed == 0 and answered >= (len(by_agent["judge"]) + len(failures)) / 2, judged
    assert judged.parsed_share >= MIN_PARSED_SHARE, judged

    metrics = {entry["agent_ref"]["name"]: entry for entry in orjson.loads(
        sidecar(out, "_aggregate_metrics.json").read_bytes())}
    choice = metrics["multiple_choice_simple_agent"]["agent_metrics"]
    assert {f"expected_answer_{letter}/mean_reward" for letter in "ABCD"} <= set(choice)
    assert sum(value for key, value in choice.items() if key.startswith("chosen_")) == pytest.approx(1.0)
    following = metrics["instruction_following_simple_agent"]["key_metrics"]
    asked = {i for row in by_agent["instruction_following"] for i in row["instruction_id_list"]}
    assert {f"mean/followed:{i}" for i in asked} <= set(following) and "instruction_level_accuracy" in following
    if "judge_simple_agent" in metrics:
        judged = metrics["judge_simple_agent"]["agent_metrics"]
        assert judged.get(f"num_failed/{FailureClass.JUDGE_ERROR}", 0.0) == len(failures)

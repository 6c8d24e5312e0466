"""What both directions share: the input rows, our stacks, reading results back, the seed a rollout saw."""

import re
from pathlib import Path
from typing import Any

import orjson
import yaml

from tests.collection.util import read_rows, run_cli
from tests.helpers.nemo_gym_reference import AGENT, example_rows
from tests.helpers.stack import environment_config
from tests.reliability.conftest import write_weather_rows

SEED_CHAT = Path(__file__).parent / "apps" / "seed_chat.py"
WEATHER_ENV = environment_config("example_single_tool_call")
SEED = re.compile(r"\[seed (\w+)\]")
REPEATS = 2
SECRET = "sk-compat-test-secret-8c1f2e"


def input_rows(path: Path) -> Path:
    """NeMo Gym's own example rows, then two of ours whose city the instant model gets right (reward 1 in our
    environment, where NeMo Gym's rows score 0): rewards that differ by row make the comparison mean something."""
    ours = write_weather_rows(path.with_name("weather.jsonl"), 2)
    path.write_bytes(example_rows().read_bytes().rstrip(b"\n") + b"\n" + ours.read_bytes())
    return path


def chat_stub_config(path: Path) -> Path:
    """An ng_run config of the seed-echoing instant model alone."""
    stub = {"seed_chat": {"entrypoint": str(SEED_CHAT)}}
    path.write_text(yaml.safe_dump({"chat_stub": {"responses_api_models": stub}}))
    return path


def our_stack_config(path: Path, chat_port: int) -> list[str]:
    """ng_run arguments for our weather environment, simple agent and vllm_model, talking to the stub."""
    tree = {
        "chat_stub": {"responses_api_models": {"seed_chat": {"entrypoint": str(SEED_CHAT), "port": chat_port}}},
        "policy_model": {"responses_api_models": {"vllm_model": {
            "base_url": f"http://127.0.0.1:{chat_port}/v1", "api_key": SECRET, "model": "instant"}}},
    }
    path.write_text(yaml.safe_dump(tree))
    return [f"+config_paths=[{WEATHER_ENV},{path}]", f"+log_dir={path.parent / 'ng_logs'}"]


def our_collect(cwd: Path, head_url: str, input_path: Path, output_path: Path, *extra: str):
    args = [f"+head_server.port={head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
            f"+input_jsonl_fpath={input_path}", f"+output_jsonl_fpath={output_path}", *extra]
    return run_cli("collect", args, cwd, timeout=300)


def rewards(output: Path) -> dict[tuple[int, int], float]:
    """Reward by (task, rollout); fails on a key written twice."""
    by_key: dict[tuple[int, int], float] = {}
    for row in read_rows(output):
        key = (row["_ng_task_index"], row["_ng_rollout_index"])
        assert key not in by_key, f"rollout {key} written twice in {output}"
        by_key[key] = row["reward"]
    return by_key


def seen_seed(row: dict[str, Any]) -> str:
    """The seed the model reported in the rollout's last message."""
    texts = [part.get("text", "") for item in row["response"]["output"] if item.get("type") == "message"
             for part in item.get("content") or []]
    found = SEED.findall(" ".join(texts))
    assert found, f"no seed report in the rollout's messages: {texts}"
    return found[-1]


def aggregate_entry(output: Path) -> dict[str, Any]:
    metrics = output.with_name(output.stem + "_aggregate_metrics.json")
    entries = orjson.loads(metrics.read_bytes())
    assert [e["agent_ref"]["name"] for e in entries] == [AGENT]
    return entries[0]

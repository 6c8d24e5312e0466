"""The shipped simple_agent + example_single_tool_call environment, driven by the scripted model, through
ng_collect_rollouts and its aggregation: the real servers a user runs, only the model is scripted."""

from pathlib import Path

import httpx
import orjson
import pytest

from tests.collection.util import keys, read_rows, run_cli, sidecar
from tests.helpers.stack import REPO_ROOT, environment_config, running_stack

SCRIPTED_MODEL = REPO_ROOT / "tests" / "helpers" / "scripted_model.py"
WEATHER_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "example_single_tool_call" / "data" / "example.jsonl"
AGENT = "example_single_tool_call_simple_agent"


# Colocated: the agent, the environment and the model server in one process, calling each other without HTTP.
@pytest.mark.parametrize("colocate", [False, True])
def test_simple_agent_weather_rollouts_through_ng_collect_rollouts(tmp_path: Path, colocate: bool) -> None:
    model = {"policy_model": {"responses_api_models": {"scripted_model": {"entrypoint": str(SCRIPTED_MODEL)}}}}
    (tmp_path / "model.yaml").write_bytes(orjson.dumps(model))
    configs = f"+config_paths=[{environment_config('example_single_tool_call')},{tmp_path / 'model.yaml'}]"
    tasks = len([line for line in WEATHER_ROWS.read_bytes().splitlines() if line.strip()])
    with running_stack([configs, f"+colocate_servers={str(colocate).lower()}"], cwd=tmp_path) as stack:
        pids = {httpx.get(f"{url}/health", trust_env=False).json()["pid"] for url in stack.servers().values()}
        assert len(pids) == (1 if colocate else 3)
        out = tmp_path / "weather.jsonl"
        result = run_cli("collect", [
            f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
            f"+input_jsonl_fpath={WEATHER_ROWS}", f"+output_jsonl_fpath={out}", "+num_repeats=2",
            "+num_samples_in_parallel=4"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(keys(out)) == [(t, r) for t in range(tasks) for r in range(2)]
    rows = read_rows(out)
    assert all(r["reward"] == 1.0 and r["agent_ref"] == {"name": AGENT} and r["expected_city"] for r in rows)
    assert all([item["type"] for item in r["response"]["output"]][-1] == "message" for r in rows)
    metrics = orjson.loads(sidecar(out, "_aggregate_metrics.json").read_bytes())
    assert len(metrics) == 1 and metrics[0]["agent_ref"] == {"name": AGENT}
    assert set(metrics[0]) == {"agent_ref", "agent_metrics", "key_metrics", "group_level_metrics"}
    assert len(metrics[0]["group_level_metrics"]) == tasks

"""A generated environment runs: ng_run starts its config, ng_collect_rollouts scores its example data, and its own
test passes under plain pytest, wherever pytest is started."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.helpers.stack import REPO_ROOT, free_port, running_stack
from tests.scaffold.util import init_environment, ng

# A weather model: it calls get_weather, which this environment does not offer, then answers without a number.
WEATHER_MODEL = REPO_ROOT / "tests" / "helpers" / "scripted_model.py"


def _rollouts(output: Path) -> list[dict]:
    return sorted((orjson.loads(line) for line in output.read_bytes().splitlines()), key=lambda r: r["_ng_task_index"])


def test_ng_run_starts_the_generated_config_and_collection_scores_the_example_data(tmp_path: Path) -> None:
    init_environment(tmp_path, "+name=letters")
    env = "resources_servers/letters"
    # A second agent on the same environment, driven by a model that never uses its tool: the verifier must say 0.
    extra = {"weather_model": {"responses_api_models": {"scripted_model": {"entrypoint": str(WEATHER_MODEL)}}},
             "weather_agent": {"responses_api_agents": {"simple_agent": {
                 "resources_server": {"type": "resources_servers", "name": "letters_resources_server"},
                 "model_server": {"type": "responses_api_models", "name": "weather_model"}}}}}
    (tmp_path / "weather.yaml").write_bytes(orjson.dumps(extra))  # JSON is valid YAML
    configs = f"{env}/configs/letters.yaml,{env}/tests/scripted_model.yaml,weather.yaml"
    expected = [orjson.loads(line)["expected_answer"] for line in (tmp_path / env / "data/example.jsonl").open()]
    with running_stack([f"+config_paths=[{configs}]"], cwd=tmp_path) as stack:
        for agent in ("letters_simple_agent", "weather_agent"):
            result = ng("collect", [f"+agent_name={agent}", f"+input_jsonl_fpath={env}/data/example.jsonl",
                                    f"+output_jsonl_fpath=results/{agent}.jsonl", f"+head_server_url={stack.head_url}"],
                        cwd=tmp_path)
            assert result.returncode == 0, result.stdout + result.stderr
    solved = _rollouts(tmp_path / "results" / "letters_simple_agent.jsonl")
    assert [r["_ng_task_index"] for r in solved] == list(range(len(expected))) and len(expected) == 5
    assert [r["extracted_answer"] for r in solved] == expected
    assert [(r["reward"], r["called_tool"]) for r in solved] == [(1.0, True)] * 5
    outputs = [item["output"] for item in solved[0]["response"]["output"] if item["type"] == "function_call_output"]
    assert [orjson.loads(output) for output in outputs] == [{"count": int(expected[0])}]
    unsolved = _rollouts(tmp_path / "results" / "weather_agent.jsonl")
    assert [(r["reward"], r["called_tool"]) for r in unsolved] == [(0.0, False)] * 5
    metrics = orjson.loads((tmp_path / "results" / "letters_simple_agent_aggregate_metrics.json").read_bytes())
    assert metrics[0]["agent_ref"]["name"] == "letters_simple_agent"
    assert metrics[0]["agent_metrics"]["mean/reward"] == 1.0


def test_e2e_collects_the_generated_example_split(tmp_path: Path) -> None:
    init_environment(tmp_path, "+name=my_env")
    env = "resources_servers/my_env"
    result = ng("e2e", [f"+config_paths=[{env}/configs/my_env.yaml,{env}/tests/scripted_model.yaml]",
                        "+split=example", "+output_jsonl_fpath=results/my_env.jsonl",
                        f"+head_server.port={free_port()}"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    rollouts = _rollouts(tmp_path / "results" / "my_env.jsonl")
    assert [(r["_ng_task_index"], r["reward"]) for r in rollouts] == [(index, 1.0) for index in range(5)]


@pytest.mark.parametrize("layout", ["pytest <folder> from a checkout", "pytest in the folder",
                                    "+output_dir outside the run directory"])
def test_the_generated_test_passes_under_plain_pytest(tmp_path: Path, layout: str) -> None:
    run_dir = tmp_path / "project"
    run_dir.mkdir()
    # A checkout's pytest settings (testpaths, timeout, markers) then apply, as in a clone of this repository.
    (run_dir / "pyproject.toml").write_bytes((REPO_ROOT / "pyproject.toml").read_bytes())
    if layout == "+output_dir outside the run directory":
        init_environment(run_dir, "+name=my_env", f"+output_dir={tmp_path / 'elsewhere'}")
        env_dir = tmp_path / "elsewhere" / "my_env"
    else:
        init_environment(run_dir, "+name=my_env")
        env_dir = run_dir / "resources_servers" / "my_env"
    cwd, args = (env_dir, []) if layout == "pytest in the folder" else (run_dir, [str(env_dir)])
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                            cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "6 passed" in result.stdout
    assert not (run_dir / "ng_logs").exists()  # the test keeps its logs in its own tmp folder


def test_ng_run_in_another_directory_names_the_missing_entrypoint(tmp_path: Path) -> None:
    init_environment(tmp_path, "+name=my_env")
    cwd = tmp_path / "resources_servers"  # one level too deep: the config's relative paths miss
    model = cwd / "my_env" / "tests" / "scripted_model.py"  # absolute, so only the environment's path misses
    result = ng("run", ["+config_paths=[my_env/configs/my_env.yaml,my_env/tests/scripted_model.yaml]",
                        f"+policy_model.responses_api_models.scripted_model.entrypoint={model}",
                        f"+head_server.port={free_port()}"], cwd=cwd)
    assert result.returncode != 0
    assert (f"entrypoint resources_servers/my_env/app.py is not a file (relative paths are relative to the "
            f"directory ng_run runs in: {cwd})") in result.stdout + result.stderr

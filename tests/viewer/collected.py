"""Two real collected runs for the viewer's tests: the shipped simple_agent + weather environment, the real
vllm_model server in front of `apps/weather_chat.py`, and the real ng_collect_rollouts (with its aggregation).

Run A gets Tokyo wrong, run B gets Cairo wrong; both fail on Atlantis. So task 1 (Tokyo) goes 0 -> 1, task 4
(Cairo) 1 -> 0, and task 6 (Atlantis) is a recorded failure in both.
"""

from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

from tests.collection.util import run_cli
from tests.helpers.stack import REPO_ROOT, environment_config, free_port, running_stack

WEATHER_CHAT = Path(__file__).parent / "apps" / "weather_chat.py"
WEATHER_ENV = environment_config("example_single_tool_call")
WEATHER_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "example_single_tool_call" / "data" / "example.jsonl"
AGENT = "example_single_tool_call_simple_agent"
CITIES = ("Paris", "Tokyo", "New York", "Sydney", "Cairo", "Lima", "Atlantis", "Oslo")
REPEATS = 2
TOKYO, CAIRO, ATLANTIS = 1, 4, 6
BEHAVIOUR_A = {"wrong": {"Tokyo": "Kyoto"}, "fail": ["Atlantis"]}
BEHAVIOUR_B = {"wrong": {"Cairo": "Giza"}, "fail": ["Atlantis"]}


@dataclass(frozen=True)
class CollectedRuns:
    run_a: Path
    run_b: Path
    workdir: Path


def _write_inputs(path: Path) -> Path:
    tools = orjson.loads(WEATHER_ROWS.read_bytes().splitlines()[0])["responses_create_params"]["tools"]
    with open(path, "wb") as out:
        for city in CITIES:
            params = {"input": [{"role": "system", "content": "You are a weather assistant. Use the tools."},
                                {"role": "user", "content": f"What's the weather in {city} today?"}],
                      "tools": tools}
            out.write(orjson.dumps({"responses_create_params": params, "expected_city": city}) + b"\n")
    return path


def collect_runs(workdir: Path) -> CollectedRuns:
    behaviour = workdir / "behaviour.json"
    behaviour.write_bytes(orjson.dumps(BEHAVIOUR_A))
    model = {"policy_model": {"responses_api_models": {"vllm_model": {
                 "base_url": "http://127.0.0.1:${chat_port}/v1", "api_key": "none", "model": "weather-chat"}}},
             "weather_chat": {"responses_api_models": {"weather_chat": {
                 "entrypoint": str(WEATHER_CHAT), "port": "${chat_port}", "behaviour_file": str(behaviour)}}},
             "chat_port": free_port()}
    (workdir / "model.yaml").write_text(yaml.safe_dump(model))
    inputs = _write_inputs(workdir / "inputs.jsonl")
    runs = {"a": workdir / "results" / "run_a.jsonl", "b": workdir / "results" / "run_b.jsonl"}
    with running_stack([f"+config_paths=[{WEATHER_ENV},{workdir / 'model.yaml'}]"], cwd=workdir) as stack:
        for label, settings in (("a", BEHAVIOUR_A), ("b", BEHAVIOUR_B)):
            behaviour.write_bytes(orjson.dumps(settings))
            result = run_cli("collect", [
                f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
                f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={runs[label]}", f"+num_repeats={REPEATS}",
                "+num_samples_in_parallel=4", "+max_attempts=1"], workdir)
            # Exit 1: the Atlantis rollouts failed, as intended; anything else is a broken collection.
            assert result.returncode == 1, result.stdout + result.stderr
            assert "FAILED: 2 rollouts" in result.stdout, result.stdout
    return CollectedRuns(runs["a"], runs["b"], workdir)

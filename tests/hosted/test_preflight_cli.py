"""A wrong model URL, key or model name is found before the first rollout: ng_e2e_collect_rollouts before it starts
any server, ng_collect_rollouts from the running model servers, +dry_run=true as well. Each is one line on stderr,
exit status 2, no resume advice, nothing written, and no generation request reaches the endpoint."""

import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.collection.util import run_cli
from tests.helpers.stack import REPO_ROOT, environment_config, free_port, running_stack
from tests.hosted.conftest import STUB_KEY, STUB_MODEL, HostedStack, model_server, stub_settings
from tests.hosted.test_workers_share_limits import _server

WEATHER_ROWS = environment_config("example_single_tool_call").parents[1] / "data" / "example.jsonl"
AGENT = "weather_agent"


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    with _server("stub", "responses_api_models", "hosted_api_stub", stub_settings(port)):
        yield f"http://127.0.0.1:{port}/v1"


def _agent(model: str) -> dict[str, Any]:
    return {AGENT: {"responses_api_agents": {"simple_agent": {
        "resources_server": {"type": "resources_servers", "name": "example_single_tool_call"},
        "model_server": {"type": "responses_api_models", "name": model},
        "datasets": [{"name": "weather", "type": "example", "jsonl_fpath": str(WEATHER_ROWS)}]}}}}


def _config(path: Path, models: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({**models, **_agent(next(iter(models)))}))
    return path


def _stats(stub: str) -> dict[str, int]:
    return HostedStack(None, Path(), stub, "", "").stats()  # type: ignore[arg-type]


def _refused(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stdout + result.stderr
    line = lines[0]
    assert line.startswith("error: model endpoint ") and line.endswith("; nothing was run"), line
    assert all(part in line for part in expected), line
    assert "resume" not in result.stdout + result.stderr and STUB_KEY not in result.stdout + result.stderr
    return line


CASES = {
    "dead_url": ({"base_url": "http://127.0.0.1:{dead}/v1"}, ["http://127.0.0.1:{dead}/v1", "is unreachable: "]),
    "wrong_key": ({"api_key": "sk-wrong-key"}, ["rejected the API key: GET /models answered HTTP 401"]),
    "wrong_model": ({"model": "gpt-none"}, [f"does not serve model 'gpt-none' (it serves: {STUB_MODEL})"]),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry_run"])
def test_e2e_refuses_a_wrong_endpoint_before_starting_anything(stub: str, tmp_path: Path, case: str,
                                                               dry_run: bool) -> None:
    dead = free_port()
    overrides, expected = CASES[case]
    settings = {key: value.format(dead=dead) for key, value in overrides.items()}
    config = _config(tmp_path / "config.yaml", {"policy_model": model_server(settings.pop("base_url", stub),
                                                                            **settings)})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = _stats(stub)
    result = run_cli("e2e", [f"+config_paths=[{environment_config('example_single_tool_call')},{config}]",
                             "+split=example", f"+output_jsonl_fpath={tmp_path / 'out' / 'r.jsonl'}",
                             *(["+dry_run=true"] if dry_run else [])], cwd)
    _refused(result, *(part.format(dead=dead) for part in expected))
    assert not list(cwd.iterdir()) and not (tmp_path / "out").exists()  # no server log, no prepared inputs
    after = _stats(stub)
    assert after["requests"] == before["requests"]  # the check never asked for a generation


@pytest.fixture(scope="module")
def bad_stack(stub: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running stack whose three model servers are each wrong in one way (the weather config's own agent uses
    policy_model)."""
    workdir = tmp_path_factory.mktemp("bad_stack")
    models = {"policy_model": model_server(f"http://127.0.0.1:{free_port()}/v1"),
              "wrong_key": model_server(stub, api_key="sk-wrong-key"),
              "wrong_model": model_server(stub, model="gpt-none")}
    config = _config(workdir / "config.yaml", models)
    with running_stack([f"+config_paths=[{environment_config('example_single_tool_call')},{config}]"],
                       cwd=workdir) as stack:
        yield stack.head_url.rsplit(":", 1)[1]


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry_run"])
def test_collect_refuses_wrong_endpoints_in_one_line(stub: str, bad_stack: str, tmp_path: Path,
                                                     dry_run: bool) -> None:
    output = tmp_path / "out" / "r.jsonl"
    before = _stats(stub)
    result = run_cli("collect", [f"+head_server.port={bad_stack}", f"+agent_name={AGENT}",
                                 f"+input_jsonl_fpath={WEATHER_ROWS}", f"+output_jsonl_fpath={output}",
                                 *(["+dry_run=true"] if dry_run else [])], tmp_path)
    line = _refused(result, "(model server 'policy_model') is unreachable",
                    "(model server 'wrong_key') rejected the API key",
                    "(model server 'wrong_model') does not serve model 'gpt-none'")
    assert line.index("'policy_model'") < line.index("'wrong_key'") < line.index("'wrong_model'")
    assert not output.parent.exists()
    assert _stats(stub)["requests"] == before["requests"]


def test_a_dead_model_url_is_one_line_naming_it(tmp_path: Path) -> None:
    """The newcomer's case: +model_url turns the shipped local_vllm_model into a vllm_model at a URL where nothing
    listens; nothing starts, no resume advice (the run never reached its model)."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    result = run_cli("e2e", [f"+config_paths=[{environment_config('example_single_tool_call')},"
                             f"{REPO_ROOT / 'configs' / 'local_vllm_model.yaml'}]", f"+model_url={dead}",
                             f"+output_jsonl_fpath={tmp_path / 'out' / 'r.jsonl'}", "+split=example"], cwd)
    line = _refused(result, f"model endpoint {dead} (model server 'policy_model') is unreachable: ",
                    "[Errno 111] Connection refused")
    assert "ConnectFailed calling" in line and not list(cwd.iterdir()) and not (tmp_path / "out").exists()

"""Each server's own settings are typed and checked when ng_run loads the config, before any server starts."""

from pathlib import Path

import pytest

from nemo_gym.config import load_global_config
from nemo_gym.errors import ConfigError
from nemo_gym.config.servers import ServerSettings
from nemo_gym.server.settings_check import check_server_settings
from nemo_gym.server.supervisor import Supervisor
from tests.helpers.stack import REPO_ROOT, free_port, ng_run_refusal

AGENT = """\
math_resources_server:
  resources_servers:
    math: {{}}
math_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {{type: resources_servers, name: math_resources_server}}
      model_server: {{type: responses_api_models, name: policy_model}}
      {setting}
policy_model:
  responses_api_models:
    vllm_model: {{base_url: "http://127.0.0.1:9/v1", model: m}}
"""
PREFIX = "setting math_agent.responses_api_agents.simple_agent."


def _check(tmp_path: Path, setting: str) -> None:
    (tmp_path / "agent.yaml").write_text(AGENT.format(setting=setting))
    check_server_settings(load_global_config(["+config_paths=[agent.yaml]"], cwd=tmp_path))


def test_max_steps_ten_fails_ng_run_before_any_server_starts(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text(AGENT.format(setting="max_steps: ten"))
    stderr = ng_run_refusal(["+config_paths=[agent.yaml]"], tmp_path)
    assert stderr.strip().splitlines() == [
        f"error: {PREFIX}max_steps must be an integer, got 'ten' (set in agent.yaml:9)"]


@pytest.mark.parametrize("setting, message", [
    ("max_steps: 0", PREFIX + "max_steps must be at least 1, got 0 (set in agent.yaml:9)"),
    ("max_step: 5", f"unknown option {PREFIX}max_step (set in agent.yaml:9); did you mean {PREFIX}max_steps?"),
    ("model_timeout_s: soon", PREFIX + "model_timeout_s must be a number, got 'soon'"),
    ("datasets: 3", PREFIX + "datasets must be a list of mappings or null, got 3"),
])
def test_bad_agent_settings_name_field_file_and_line(tmp_path: Path, setting: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _check(tmp_path, setting)
    assert message in str(info.value)


def test_missing_required_setting(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("p:\n  responses_api_models:\n    openai_model: {model: m}\n")
    with pytest.raises(ConfigError, match=r"missing required setting p.responses_api_models.openai_model.base_url"):
        check_server_settings(load_global_config(["+config_paths=[a.yaml]"], cwd=tmp_path))


def test_unknown_keys_of_nemo_gym_configs_are_allowed(tmp_path: Path) -> None:
    _check(tmp_path, "description: a NeMo Gym key no implementation reads\n      license: MIT")


@pytest.mark.parametrize("config", sorted(str(p.relative_to(REPO_ROOT)) for p in [
    *(REPO_ROOT / "configs").glob("*.yaml"), *(REPO_ROOT / "benchmarks").glob("*/config.yaml")]))
def test_every_shipped_config_passes(config: str) -> None:
    model = [] if "model" in config else ["configs/vllm_model.yaml"]
    paths = ",".join([config, *model])
    values = ["+policy_base_url=http://127.0.0.1:9/v1", "+policy_api_key=k", "+policy_model_name=m",
              # the judge benchmark's judge model takes its own three values, as its config's header says
              "+judge_base_url=http://127.0.0.1:9/v1", "+judge_api_key=k", "+judge_model_name=j"]
    check_server_settings(load_global_config([f"+config_paths=[{paths}]", *values], cwd=REPO_ROOT))


def test_ng_run_plans_each_server_from_its_typed_settings(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "a.yaml").write_text(f"set:\n  resources_servers:\n    math: {{port: {port}, startup_timeout_s: 7}}\n"
                                     "unset:\n  resources_servers:\n    math: {}\n")
    config = load_global_config(["+config_paths=[a.yaml]", f"+head_server.port={free_port()}"], cwd=tmp_path)
    planned = {p.spec.name: p for p in Supervisor(config, tmp_path / "logs").processes}  # plans only
    assert planned["set"].url == f"http://127.0.0.1:{port}" and planned["set"].settings.startup_timeout_s == 7
    default = ServerSettings()
    assert planned["unset"].settings.startup_timeout_s == default.startup_timeout_s
    assert planned["unset"].url == f"http://{default.host}:{planned['unset'].settings.port}"  # a free port

"""A rollout's timeouts nest (nemo_gym.config.timeouts): a config whose inner timeout is longer than the one around it
is refused when it loads, naming both keys, both values and where each was set; the defaults nest."""

import subprocess
import sys
from pathlib import Path

import pytest

from nemo_gym.config import GlobalConfig, load_global_config
from nemo_gym.config.timeouts import (
    MODEL_CALL_TIMEOUT_S, MODEL_REQUEST_TIMEOUT_S, ROLLOUT_TIMEOUT_S, Timeout, TimeoutNestingError, check_nested,
)
from nemo_gym.server.settings_check import check_server_settings
from tests.config.test_server_settings import AGENT
from tests.helpers.stack import ng_run_refusal

AGENT_KEY = "math_agent.responses_api_agents.simple_agent.model_timeout_s"
MODEL_KEY = "policy_model.responses_api_models.vllm_model.request_timeout_s"


def _config(tmp_path: Path, agent: str = "", *overrides: str) -> GlobalConfig:
    (tmp_path / "agent.yaml").write_text(AGENT.format(setting=agent))
    return load_global_config(["+config_paths=[agent.yaml]", *overrides], cwd=tmp_path)


def test_the_defaults_nest() -> None:
    assert MODEL_REQUEST_TIMEOUT_S <= MODEL_CALL_TIMEOUT_S <= ROLLOUT_TIMEOUT_S


def test_a_vllm_request_longer_than_the_agents_model_call_fails_ng_run_before_any_server_starts(
        tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text(AGENT.format(setting=""))
    error = ng_run_refusal(["+config_paths=[agent.yaml]", f"+{MODEL_KEY}=900"], tmp_path).strip().splitlines()[-1]
    assert error.startswith(f"error: {MODEL_KEY} = 900 s (set on the command line) is longer than {AGENT_KEY} = 600 s "
                            f"(the default), which waits for it"), error


def test_ng_e2e_collect_rollouts_refuses_a_model_call_longer_than_its_rollout_attempt(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text(AGENT.format(setting="model_timeout_s: 900"))
    done = subprocess.run(
        [sys.executable, "-c", "from nemo_gym.cli.e2e import main; main()", "+config_paths=[agent.yaml]",
         "+dry_run=true", "+rollout_timeout_s=300", f"+output_jsonl_fpath={tmp_path}/out.jsonl", "+split=example"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"error: {AGENT_KEY} = 900 s (set in agent.yaml:9) is longer than rollout_timeout_s = 300 s (set on the "
        f"command line), which waits for it")


def test_an_agent_model_call_longer_than_the_rollout_attempt_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, "model_timeout_s: 2400")
    check_server_settings(config)  # nothing wraps the agent's calls here (ng_run alone): it nests
    with pytest.raises(TimeoutNestingError) as refused:
        check_server_settings(config, rollout_timeout_s=ROLLOUT_TIMEOUT_S)
    assert str(refused.value).startswith(f"{AGENT_KEY} = 2400 s (set in agent.yaml:9) is longer than "
                                         f"rollout_timeout_s = 1800 s (the default)")
    # A longer rollout attempt, given on the command line, takes it.
    longer = _config(tmp_path, "model_timeout_s: 2400", "+rollout_timeout_s=3600")
    check_server_settings(longer, rollout_timeout_s=3600.0)


def test_equal_timeouts_nest_and_a_longer_outer_one_too(tmp_path: Path) -> None:
    check_server_settings(_config(tmp_path, "model_timeout_s: 900", f"+{MODEL_KEY}=900"), rollout_timeout_s=900.0)
    check_nested(Timeout("inner", 1.0), Timeout("outer", 2.0))

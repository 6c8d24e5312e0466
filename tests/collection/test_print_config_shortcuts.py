"""+print_config after +model_url / +model shows one consistent policy model: env.yaml's policy_base_url and
policy_model_name take the shortcut's values instead of staying, stale, next to the overridden server keys."""

from pathlib import Path

import yaml

from tests.collection.util import run_cli
from tests.helpers.stack import REPO_ROOT, environment_config

CONFIGS = f"+config_paths=[{environment_config('math')},{REPO_ROOT / 'configs' / 'vllm_model.yaml'}]"


def _printed(tmp_path: Path, *args: str) -> dict:
    result = run_cli("run", [CONFIGS, *args, "+print_config=true"], tmp_path)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_print_config_shows_no_stale_policy_values_next_to_the_shortcuts(tmp_path: Path) -> None:
    (tmp_path / "env.yaml").write_text("policy_base_url: http://127.0.0.1:8000/v1\npolicy_model_name: env-model\n")
    printed = _printed(tmp_path, "+model_url=http://127.0.0.1:8011/v1")
    server = printed["policy_model"]["responses_api_models"]["vllm_model"]
    assert server["base_url"] == printed["policy_base_url"] == "http://127.0.0.1:8011/v1"
    assert server["model"] == printed["policy_model_name"] == "env-model"
    assert "8000" not in yaml.safe_dump(printed)

    printed = _printed(tmp_path, "+model_url=http://127.0.0.1:8011/v1", "+model=other")
    assert printed["policy_model"]["responses_api_models"]["vllm_model"]["model"] == "other"
    assert printed["policy_model_name"] == "other"

    (tmp_path / "env.yaml").unlink()  # without env.yaml's values nothing is added
    printed = _printed(tmp_path, "+model_url=http://127.0.0.1:8011/v1", "+model=other")
    assert "policy_base_url" not in printed and "policy_model_name" not in printed

"""Config merging order, interpolation, missing values, server references and secret redaction."""

from pathlib import Path

import pytest

from nemo_gym.config import load_global_config, redact_secrets, secret_values
from nemo_gym.config.redact import REDACTED
from nemo_gym.errors import ConfigError

MODEL_YAML = """\
policy_model:
  responses_api_models:
    vllm_model:
      base_url: ${policy_base_url}
      api_key: ${policy_api_key}
      model: tiny
"""


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return path.name


def test_merge_order_files_then_env_then_command_line(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "x: from_a\ny: from_a\nz: from_a\nw: from_a\n")
    b = write(tmp_path / "b.yaml", "y: from_b\nz: from_b\nw: from_b\n")
    write(tmp_path / "env.yaml", "z: from_env\nw: from_env\n")
    cfg = load_global_config([f"+config_paths=[{a},{b}]", "+w=from_cli"], cwd=tmp_path)
    assert (cfg.get("x"), cfg.get("y"), cfg.get("z"), cfg.get("w")) == ("from_a", "from_b", "from_env", "from_cli")
    assert cfg.source_of("x") == "a.yaml:1"
    assert cfg.source_of("y") == "b.yaml:1"
    assert cfg.source_of("z") == "env.yaml:1"
    assert cfg.source_of("w") == "the command line"


def test_nested_merge_keeps_sibling_keys(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "responses_create_params:\n  p: 1\n  q: 2\n")
    cfg = load_global_config([f"+config_paths=[{a}]", "responses_create_params.q=3", "++responses_create_params.r=4"],
                             cwd=tmp_path)
    assert cfg.get("responses_create_params") == {"p": 1, "q": 3, "r": 4}


def test_interpolation_from_env_yaml(tmp_path: Path) -> None:
    m = write(tmp_path / "m.yaml", MODEL_YAML)
    write(tmp_path / "env.yaml", "policy_base_url: http://127.0.0.1:9/v1\npolicy_api_key: sk-abc\n")
    cfg = load_global_config([f"+config_paths=[{m}]"], cwd=tmp_path)
    settings = cfg.servers()["policy_model"].settings
    assert settings["base_url"] == "http://127.0.0.1:9/v1"
    assert settings["api_key"] == "sk-abc"


def test_command_line_wins_over_env_yaml(tmp_path: Path) -> None:
    m = write(tmp_path / "m.yaml", MODEL_YAML)
    write(tmp_path / "env.yaml", "policy_base_url: http://env/v1\npolicy_api_key: k\n")
    cfg = load_global_config([f"+config_paths=[{m}]", "+policy_base_url=http://cli/v1"], cwd=tmp_path)
    assert cfg.servers()["policy_model"].settings["base_url"] == "http://cli/v1"


def test_missing_interpolated_value_names_key_and_file(tmp_path: Path) -> None:
    m = write(tmp_path / "m.yaml", MODEL_YAML)
    with pytest.raises(ConfigError) as err:
        load_global_config([f"+config_paths=[{m}]", "+policy_api_key=k"], cwd=tmp_path)
    message = str(err.value)
    assert "policy_base_url" in message and "m.yaml:4" in message and "\n" not in message


def test_mandatory_question_marks_fail_naming_key_and_file(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "head_server:\n  port: ???\n")
    with pytest.raises(ConfigError, match=r"missing mandatory value 'head_server.port' \(a.yaml:2"):
        load_global_config([f"+config_paths=[{a}]"], cwd=tmp_path)
    # Supplying it on the command line fixes it.
    assert load_global_config([f"+config_paths=[{a}]", "+head_server.port=5"], cwd=tmp_path).get("head_server.port") == 5


def test_missing_config_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found: nope.yaml"):
        load_global_config(["+config_paths=[nope.yaml]"], cwd=tmp_path)
    bad = write(tmp_path / "bad.yaml", "a: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml: invalid YAML"):
        load_global_config([f"+config_paths=[{bad}]"], cwd=tmp_path)


def test_unknown_server_reference_is_an_error(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a.yaml",
        "agent:\n  responses_api_agents:\n    simple_agent:\n"
        "      model_server: {type: responses_api_models, name: no_such_model}\n",
    )
    with pytest.raises(ConfigError, match="unknown responses_api_models server 'no_such_model'") as err:
        load_global_config([f"+config_paths=[{a}]"], cwd=tmp_path)
    assert "a.yaml:4" in str(err.value)


def test_reference_to_wrong_kind_is_an_error(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a.yaml",
        "env:\n  resources_servers:\n    math: {}\n"
        "agent:\n  responses_api_agents:\n    simple_agent:\n      model_server: {type: responses_api_models, name: env}\n",
    )
    with pytest.raises(ConfigError, match="it is a resources_servers server"):
        load_global_config([f"+config_paths=[{a}]"], cwd=tmp_path)


def test_comma_separated_value_is_literal_text_not_a_sweep(tmp_path: Path) -> None:
    cfg = load_global_config(["+input_glob=a/*.jsonl,b/*.jsonl", "+paths=[x,y]"], cwd=tmp_path)
    assert cfg.get("input_glob") == "a/*.jsonl,b/*.jsonl"
    assert cfg.get("paths") == ["x", "y"]


def test_bad_override_syntax(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot parse command-line override"):
        load_global_config(["+a=[1,2"], cwd=tmp_path)


@pytest.mark.parametrize(
    "key,secret",
    [
        ("api_key", True), ("policy_api_key", True), ("OPENAI_API_KEY", True), ("hf_token", True),
        ("client_secret", True), ("db_password", True), ("apikey", True),
        ("max_tokens", False), ("max_output_tokens", False), ("model", False), ("tokenizer", False),
    ],
)
def test_redaction_by_key(key: str, secret: bool) -> None:
    redacted = redact_secrets({"outer": [{key: "s3cr3t-value"}]})
    assert (redacted["outer"][0][key] == REDACTED) is secret


def test_redaction_leaves_non_string_flags_and_collects_values() -> None:
    cfg = {"return_token_id_information": True, "a": {"api_key": "sk-123456"}, "token": ""}
    assert redact_secrets(cfg) == {"return_token_id_information": True, "a": {"api_key": REDACTED}, "token": ""}
    assert secret_values(cfg) == {"sk-123456"}

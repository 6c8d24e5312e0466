"""Shortcuts every user reaches for first: `--version` on every command, `+print_config=true`, `+model=...` and
`+model_url=...` instead of the nested keys of the policy model, and `+dry_run=true` of ng_e2e_collect_rollouts,
which starts no server."""

import importlib
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from nemo_gym.cli import e2e
from nemo_gym.config import load_global_config
from nemo_gym.config.redact import REDACTED
from nemo_gym.errors import ConfigError
from tests.helpers.stack import REPO_ROOT

CONFIGS = "+config_paths=[nemo_gym/resources_servers/math/configs/math.yaml,configs/local_vllm_model.yaml]"
SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_every_command_prints_its_version(command: str, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    module, function = SCRIPTS[command].split(":")
    monkeypatch.setattr(sys, "argv", [command, "--version"])
    with pytest.raises(SystemExit) as stopped:
        getattr(importlib.import_module(module), function)()
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"{command} (nemo_gym) {VERSION}\n"


def _printed(args: list[str], capsys: pytest.CaptureFixture) -> dict:
    with pytest.raises(SystemExit) as stopped:
        e2e.main_args([CONFIGS, "+split=example", "+output_jsonl_fpath=never/r.jsonl", "+print_config=true", *args])
    assert stopped.value.code == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_print_config_shows_the_resolved_config_with_secrets_redacted(capsys: pytest.CaptureFixture,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    printed = _printed(["+policy_api_key=sk-live-0123456789", "+agent_url_note=${policy_api_key}"], capsys)
    assert printed["policy_api_key"] == REDACTED and "sk-live-0123456789" not in yaml.safe_dump(printed)
    assert printed["agent_url_note"] == REDACTED  # a copy of the secret under another key as well
    local = printed["policy_model"]["responses_api_models"]["local_vllm_model"]
    assert local["model_path"] == "models/SmolLM2-135M-Instruct" and local["max_model_len"] == 2048
    assert printed["split"] == "example" and "print_config" not in printed
    assert not (REPO_ROOT / "never").exists()


def test_model_shortcut_sets_the_local_model_folder(capsys: pytest.CaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    local = _printed(["+model=/data/checkpoints/Qwen3-0.6B/"], capsys)["policy_model"]["responses_api_models"]
    assert local["local_vllm_model"]["model_path"] == "/data/checkpoints/Qwen3-0.6B/"
    assert local["local_vllm_model"]["served_model_name"] == "Qwen3-0.6B"


def test_model_url_points_the_policy_at_a_running_server(tmp_path: Path) -> None:
    (tmp_path / "env.yaml").write_text("policy_api_key: sk-from-env-file\n")
    config = load_global_config([CONFIGS, "+model_url=http://127.0.0.1:8000/v1"], cwd=tmp_path)
    remote = config.values["policy_model"]["responses_api_models"]
    assert list(remote) == ["vllm_model"]
    settings = remote["vllm_model"]
    assert settings["base_url"] == "http://127.0.0.1:8000/v1" and settings["model"] == "SmolLM2-135M-Instruct"
    assert settings["api_key"] == "sk-from-env-file" and settings["request_timeout_s"] == 600
    assert not {"model_path", "vllm_args", "dtype", "max_model_len", "cpu_kvcache_space_gib"} & set(settings)

    named = load_global_config([CONFIGS, "+model_url=http://127.0.0.1:8000/v1", "+model=my-org/served"],
                               cwd=tmp_path).values["policy_model"]["responses_api_models"]["vllm_model"]
    assert named["model"] == "my-org/served"

    hosted = load_global_config(["+config_paths=[configs/vllm_model.yaml]", "+model_url=https://api.example.com/v1",
                                 "+model=gpt-test", "+policy_base_url=unused", "+policy_model_name=unused"],
                                cwd=tmp_path).values["policy_model"]["responses_api_models"]["vllm_model"]
    assert (hosted["base_url"], hosted["model"], hosted["api_key"]) == (
        "https://api.example.com/v1", "gpt-test", "sk-from-env-file")


def test_model_shortcut_needs_one_policy_model(tmp_path: Path) -> None:
    two = {name: {"responses_api_models": {"vllm_model": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}}}
           for name in ("judge_a", "judge_b")}
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(two))
    with pytest.raises(ConfigError, match=r"need a 'policy_model' server, or exactly one .* \(found: judge_a, judge_b\)"):
        load_global_config([f"+config_paths=[{tmp_path / 'two.yaml'}]", "+model=x"], cwd=tmp_path)


def test_e2e_dry_run_checks_the_split_and_starts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(REPO_ROOT)  # the datasets' paths are relative to the checkout

    def no_servers(*args: object) -> None:
        raise AssertionError("a dry run started the servers")

    monkeypatch.setattr("nemo_gym.rollout_collection.e2e.Supervisor", no_servers)
    out = tmp_path / "results" / "r.jsonl"
    code = e2e.main_args([CONFIGS, "+split=example", f"+output_jsonl_fpath={out}", "+num_repeats=3", "+dry_run=true"])
    assert code == 0
    printed = capsys.readouterr().out
    rows = sum(1 for line in (REPO_ROOT / "nemo_gym/resources_servers/math/data/arithmetic_example.jsonl")
               .read_text().splitlines() if line.strip())
    assert f"planned rollouts: {rows * 3} (shard 0 of 1; 256 in parallel) by agent: math_simple_agent: {rows * 3}" \
        in printed
    assert list(tmp_path.iterdir()) == []  # not even the results folder

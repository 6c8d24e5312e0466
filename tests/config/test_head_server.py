"""The head server's address: typed settings with one default, one URL for every reader, errors naming the key."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from nemo_gym.cli import status
from nemo_gym.config import load_global_config
from nemo_gym.config.global_settings import HeadServerSettings
from nemo_gym.errors import ConfigError
from nemo_gym.rollout_collection import RolloutCollectionConfig
from nemo_gym.rollout_collection.helper import head_server_url
from nemo_gym.server.supervisor import Supervisor, free_port

REQUIRED = {"input_jsonl_fpath": "in.jsonl", "output_jsonl_fpath": "out/r.jsonl"}


def test_every_reader_derives_the_same_url(tmp_path: Path) -> None:
    port = free_port()
    config = load_global_config([f"+head_server.port={port}"], cwd=tmp_path, require_complete=False)
    expected = f"http://127.0.0.1:{port}"
    assert Supervisor(config, tmp_path / "logs").head_url == expected  # plans only: nothing starts
    assert RolloutCollectionConfig.from_global(
        load_global_config([f"+head_server.port={port}", *(f"+{k}={v}" for k, v in REQUIRED.items())],
                           cwd=tmp_path, require_complete=False)).head_server_url == expected
    assert head_server_url({"host": "127.0.0.1", "port": port}) == expected
    assert head_server_url(SimpleNamespace(host="127.0.0.1", port=port)) == expected
    # Without any setting, each falls back on the one default.
    default = HeadServerSettings().url
    assert head_server_url(None) == default == RolloutCollectionConfig.from_mapping(REQUIRED).head_server_url


def test_a_bad_value_in_a_file_is_named_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "head.yaml").write_text("head_server:\n  host: 127.0.0.1\n  port: eleven\n")
    args = ["+config_paths=[head.yaml]", *(f"+{k}={v}" for k, v in REQUIRED.items())]
    with pytest.raises(ConfigError) as info:
        RolloutCollectionConfig.from_global(load_global_config(args, cwd=tmp_path, require_complete=False))
    assert str(info.value) == "+head_server.port must be an integer, got 'eleven' (set in head.yaml:3)"


def test_a_bad_value_on_the_command_line_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        status.main_args(["+head_server.port=abc"])  # refused before any head server is asked
    assert str(info.value) == "+head_server.port must be an integer, got 'abc'"


@pytest.mark.parametrize("config, message", [
    ({"host": "127.0.0.1", "port": "11000"}, "+head_server.port must be an integer, got '11000'"),
    ({"port": 0}, "+head_server.port must be at least 1, got 0"),
    (SimpleNamespace(host="127.0.0.1", port=70000), "+head_server.port must be at most 65535, got 70000"),
])
def test_the_python_api_refuses_a_bad_head_server_by_key(config: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        head_server_url(config)
    assert str(info.value) == message

"""A user's server class that overrides `serve` must take the socket ng_run holds for its port; one that cannot is
refused before any server starts, naming the file and line of its `serve`."""

from pathlib import Path

import pytest

from nemo_gym.config import load_global_config
from nemo_gym.errors import ConfigError
from nemo_gym.server.settings_check import check_server_settings
from tests.helpers.stack import ng_run_refusal

CONFIG = """\
math_resources_server:
  resources_servers:
    math:
      entrypoint: my_math.py
"""
SERVER = """\
from nemo_gym.resources_servers.math.app import MathResourcesServer


class MyMath(MathResourcesServer):
    def serve(self, {parameters}):
        super().serve(host, port{passed})
"""


def _write(tmp_path: Path, parameters: str, passed: str) -> None:
    """The config and its server's file, in `tmp_path`: the directory ng_run runs in (the entrypoint is relative)."""
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "my_math.py").write_text(SERVER.format(parameters=parameters, passed=passed))


def test_a_serve_without_sock_is_refused_naming_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "host, port", "")
    with pytest.raises(ConfigError) as info:
        check_server_settings(load_global_config(["+config_paths=[config.yaml]"], cwd=tmp_path))
    assert str(info.value).startswith(
        f"server 'math_resources_server': MyMath.serve ({tmp_path / 'my_math.py'}:5) must take `sock`")


@pytest.mark.parametrize("parameters, passed", [
    ("host, port, sock=None", ", sock"),
    ("host, port, *args, **kwargs", ", *args, **kwargs"),
])
def test_a_serve_that_takes_the_socket_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parameters: str,
                                              passed: str) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, parameters, passed)
    check_server_settings(load_global_config(["+config_paths=[config.yaml]"], cwd=tmp_path))


def test_ng_run_refuses_it_before_any_server_starts(tmp_path: Path) -> None:
    _write(tmp_path, "host, port", "")
    stderr = ng_run_refusal(["+config_paths=[config.yaml]"], tmp_path)
    assert f"MyMath.serve ({tmp_path / 'my_math.py'}:5) must take `sock`" in stderr

"""code_exec's settings: defaults, and a bad value is refused naming the setting."""

import pytest

from nemo_gym.config.servers import ServerSpec
from nemo_gym.errors import ConfigError
from nemo_gym.resources_servers.code_exec.app import CodeExecResourcesServer
from nemo_gym.resources_servers.code_exec.executor import SandboxLimits
from nemo_gym.resources_servers.code_exec.settings import DEFAULT_SANDBOX_UID_BASE
from nemo_gym.server.base import server_settings


def read_settings(values: dict):
    return server_settings(CodeExecResourcesServer, ServerSpec("s", "resources_servers", "code_exec", values))


def test_defaults() -> None:
    settings = read_settings({"host": "127.0.0.1"})
    assert settings.limits == SandboxLimits(timeout_s=10.0, memory_mb=1024, max_processes=32,
                                            max_output_bytes=1 << 20)
    assert (settings.max_concurrent, settings.allow_unsandboxed, settings.bwrap_path) == (8, False, None)
    assert settings.sandbox_uid_base == DEFAULT_SANDBOX_UID_BASE


def test_values_are_read() -> None:
    settings = read_settings({"timeout_s": 2.5, "memory_mb": 256, "max_processes": 4, "max_output_bytes": 100,
                              "max_concurrent": 3, "allow_unsandboxed": True, "bwrap_path": "/x/bwrap"})
    assert settings.limits == SandboxLimits(timeout_s=2.5, memory_mb=256, max_processes=4, max_output_bytes=100)
    assert (settings.max_concurrent, settings.allow_unsandboxed, settings.bwrap_path) == (3, True, "/x/bwrap")


SETTING = "setting s.resources_servers.code_exec."


@pytest.mark.parametrize(("key", "value", "says"), [
    ("timeout_s", 0, SETTING + "timeout_s must be positive, got 0"),
    ("memory_mb", 1.5, SETTING + "memory_mb must be an integer, got 1.5"),
    ("max_processes", "many", SETTING + "max_processes must be an integer, got 'many'"),
    ("max_concurrent", True, SETTING + "max_concurrent must be an integer, got True"),
    ("allow_unsandboxed", "yes", SETTING + "allow_unsandboxed must be true or false, got 'yes'"),
    ("bwrap_path", ["/x"], SETTING + "bwrap_path must be a string or null, got ['/x']"),
    ("sandbox_uid_base", 2**32 - 4, "server 's': 'sandbox_uid_base' + 'max_concurrent' must stay below"),
    ("max_concurent", 3, f"unknown option {SETTING}max_concurent; did you mean {SETTING}max_concurrent?"),
])
def test_bad_values_name_the_setting(key: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_settings({key: value})
    assert says in str(info.value)

"""code_exec's settings: defaults, and a bad value stops the server with a message naming the setting."""

import pytest

from nemo_gym.errors import ConfigError
from nemo_gym.resources_servers.code_exec.executor import SandboxLimits
from nemo_gym.resources_servers.code_exec.settings import DEFAULT_SANDBOX_UID_BASE, read_settings


def test_defaults() -> None:
    settings = read_settings("s", {"host": "127.0.0.1"})
    assert settings.limits == SandboxLimits(timeout_s=10.0, memory_mb=1024, max_processes=32,
                                            max_output_bytes=1 << 20)
    assert (settings.max_concurrent, settings.allow_unsandboxed, settings.bwrap_path) == (8, False, None)
    assert settings.sandbox_uid_base == DEFAULT_SANDBOX_UID_BASE


def test_values_are_read() -> None:
    settings = read_settings("s", {"timeout_s": 2.5, "memory_mb": 256, "max_processes": 4, "max_output_bytes": 100,
                                   "max_concurrent": 3, "allow_unsandboxed": True, "bwrap_path": "/x/bwrap"})
    assert settings.limits == SandboxLimits(timeout_s=2.5, memory_mb=256, max_processes=4, max_output_bytes=100)
    assert (settings.max_concurrent, settings.allow_unsandboxed, settings.bwrap_path) == (3, True, "/x/bwrap")


@pytest.mark.parametrize(("key", "value", "says"), [
    ("timeout_s", 0, "'timeout_s' must be a positive number, got 0"),
    ("memory_mb", 1.5, "'memory_mb' must be a positive integer, got 1.5"),
    ("max_processes", "many", "'max_processes' must be a positive integer, got 'many'"),
    ("max_concurrent", True, "'max_concurrent' must be a positive integer, got True"),
    ("allow_unsandboxed", "yes", "'allow_unsandboxed' must be true or false, got 'yes'"),
    ("bwrap_path", 3, "'bwrap_path' must be a path, got 3"),
    ("sandbox_uid_base", 2**32 - 4, "'sandbox_uid_base' + 'max_concurrent' must stay below"),
])
def test_bad_values_name_the_setting(key: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError, match=f"code_exec server 's': {says}".replace("+", r"\+")):
        read_settings("s", {key: value})

"""The code_exec server's settings, checked once at start-up: a bad value stops the server naming the setting."""

from dataclasses import dataclass
from typing import Any, Optional

from nemo_gym.errors import ConfigError
from nemo_gym.resources_servers.code_exec.executor import SandboxLimits

# Root runs each program as uid SANDBOX_UID_BASE + slot: far above system accounts and the usual /etc/subuid
# ranges, so no other process on the machine counts against (or can signal) a sandbox's processes.
DEFAULT_SANDBOX_UID_BASE = 1_900_000_000
MAX_UID = 2**32 - 2  # (uid_t)-1 means "unchanged" to setresuid


@dataclass(frozen=True)
class CodeExecSettings:
    limits: SandboxLimits
    max_concurrent: int
    allow_unsandboxed: bool
    bwrap_path: Optional[str]
    sandbox_uid_base: int


def _number(server: str, config: dict[str, Any], key: str, default: float, kind: type) -> Any:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or (
            kind is int and value != int(value)):
        noun = "a positive integer" if kind is int else "a positive number"
        raise ConfigError(f"code_exec server '{server}': '{key}' must be {noun}, got {value!r}")
    return kind(value)


def read_settings(server: str, config: dict[str, Any]) -> CodeExecSettings:
    defaults = SandboxLimits()
    allow = config.get("allow_unsandboxed", False)
    if not isinstance(allow, bool):
        raise ConfigError(f"code_exec server '{server}': 'allow_unsandboxed' must be true or false, got {allow!r}")
    bwrap_path = config.get("bwrap_path")
    if bwrap_path is not None and not isinstance(bwrap_path, str):
        raise ConfigError(f"code_exec server '{server}': 'bwrap_path' must be a path, got {bwrap_path!r}")
    limits = SandboxLimits(
        timeout_s=_number(server, config, "timeout_s", defaults.timeout_s, float),
        memory_mb=_number(server, config, "memory_mb", defaults.memory_mb, int),
        max_processes=_number(server, config, "max_processes", defaults.max_processes, int),
        max_output_bytes=_number(server, config, "max_output_bytes", defaults.max_output_bytes, int),
    )
    max_concurrent = _number(server, config, "max_concurrent", 8, int)
    uid_base = _number(server, config, "sandbox_uid_base", DEFAULT_SANDBOX_UID_BASE, int)
    if uid_base + max_concurrent > MAX_UID:
        raise ConfigError(f"code_exec server '{server}': 'sandbox_uid_base' + 'max_concurrent' must stay below "
                          f"{MAX_UID}, got {uid_base} + {max_concurrent}")
    return CodeExecSettings(limits=limits, max_concurrent=max_concurrent, allow_unsandboxed=allow,
                            bwrap_path=bwrap_path, sandbox_uid_base=uid_base)

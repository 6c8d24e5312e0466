"""Runs programs under resource limits, in the bwrap sandbox or (only where allowed) without it, a bounded number
at a time, without ever blocking the event loop.

Each execution: a fresh nonce and the program go in through a memfd; the launcher (launcher.py) applies the rlimits
inside and reports on a status pipe; stdout and stderr share one pipe, of which the last OUTPUT_TAIL_BYTES are kept
and at most `max_output_bytes` are accepted. The process runs in its own session: at the wall-clock deadline or the
output cap the whole group is killed (bwrap's pid namespace takes everything inside down with it).
"""

import asyncio
import json
import math
import os
import secrets
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from nemo_gym.resources_servers.code_exec import launcher
from nemo_gym.resources_servers.code_exec.bwrap import SANDBOX_ENV, bwrap_command, sandbox_python
from nemo_gym.resources_servers.code_exec.outcomes import (
    FAILED, MEMORY, PASSED, SANDBOX_DENIED, ExecutionResult, ProcessEnd, classify,
)
from nemo_gym.resources_servers.code_exec.seccomp import namespace_filter
from nemo_gym.server.process_group import signal_group

LAUNCHER_SOURCE = Path(launcher.__file__).read_text()
OUTPUT_TAIL_BYTES = 4096
STATUS_CAP_BYTES = 65536
FILE_SIZE_BYTES = 16 << 20  # RLIMIT_FSIZE: the largest file the program may write
OPEN_FILES = 64  # RLIMIT_NOFILE
WORKDIR_BYTES = 64 << 20  # size of the sandbox's tmpfs working directory
DRAIN_GRACE_S = 2.0  # after the program ended, how long its pipes may take to close
_CHUNK = 65536


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0
    memory_mb: int = 1024
    max_processes: int = 32  # processes and threads, the program's own included
    max_output_bytes: int = 1 << 20


def _kill(proc: asyncio.subprocess.Process) -> None:
    """Kill the process's group while its leader is unreaped: until then no other group can have taken its id."""
    if proc.returncode is None:
        signal_group(proc.pid, signal.SIGKILL)


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("nemo_gym_program")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def _pipe_reader(fd: int) -> tuple[asyncio.BaseTransport, asyncio.StreamReader]:
    reader = asyncio.StreamReader(limit=_CHUNK)
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0))
    return transport, reader


def _parse_status(data: bytes, nonce: bytes) -> tuple[bool, Optional[tuple[str, str]]]:
    """(started, report): only lines that carry this execution's nonce count; the last report wins."""
    started, report = False, None
    for line in data.splitlines():
        head, _, rest = line.partition(b" ")
        if head != nonce:
            continue
        if rest == b"started":
            started = True
            continue
        try:
            fields = json.loads(rest)
            if fields["outcome"] in (PASSED, FAILED, MEMORY):
                report = (fields["outcome"], str(fields["detail"]))
        except (ValueError, KeyError, TypeError):
            continue
    return started, report


class Executor:
    """`await run(program)`; `bwrap=None` runs without a sandbox (limits, own session and directory only)."""

    def __init__(self, limits: SandboxLimits, bwrap: Optional[Path], max_concurrent: int, uid_base: int) -> None:
        self.limits = limits
        self.sandboxed = bwrap is not None
        self._python = sandbox_python()
        self._bwrap = bwrap
        self._seccomp = namespace_filter() if bwrap is not None else None
        # A slot per program at once, each with its own uid (used when root runs the sandbox): processes of one uid
        # share RLIMIT_NPROC, so concurrent programs must not share one.
        self._free_uids: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(max_concurrent):
            self._free_uids.put_nowait(uid_base + slot)

    async def run(self, program: str) -> tuple[ExecutionResult, float]:
        """(result, seconds spent waiting for a free slot)."""
        queued = time.monotonic()
        uid = await self._free_uids.get()
        try:
            waited = time.monotonic() - queued
            return await self._execute(program, uid), waited
        finally:
            self._free_uids.put_nowait(uid)

    def _command(self, status_fd: int, program_fd: int, seccomp_fd: Optional[int], uid: int) -> list[str]:
        limits = self.limits
        prefix = bwrap_command(self._bwrap, self._python, WORKDIR_BYTES, seccomp_fd) if self._bwrap else []
        # Root's bwrap starts the program as root: the launcher drops to the slot's uid. Without a sandbox the
        # program keeps the server's uid (the interpreter may sit where no other uid can read, e.g. under /root).
        drop_to = uid if self.sandboxed and os.geteuid() == 0 else -1
        return [
            *prefix, str(self._python), "-I", "-u", "-c", LAUNCHER_SOURCE,
            str(status_fd), str(program_fd), str(math.ceil(limits.timeout_s)), str(limits.memory_mb << 20),
            str(limits.max_processes), str(FILE_SIZE_BYTES), str(OPEN_FILES), str(drop_to),
        ]

    async def _execute(self, program: str, uid: int) -> ExecutionResult:
        nonce = secrets.token_hex(16).encode()
        workdir = None if self.sandboxed else tempfile.mkdtemp(prefix="nemo_gym_code_exec_")
        try:
            return await self._spawn_and_supervise(program, nonce, uid, workdir)
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)

    async def _spawn_and_supervise(self, program: str, nonce: bytes, uid: int,
                                   workdir: Optional[str]) -> ExecutionResult:
        status_read, status_write = os.pipe()
        program_fd = _memfd(nonce + b"\n" + program.encode("utf-8", errors="replace"))
        seccomp_fd = _memfd(self._seccomp) if self._seccomp is not None else None
        passed_fds = (status_write, program_fd) + ((seccomp_fd,) if seccomp_fd is not None else ())
        started = time.monotonic()
        try:
            # Only an unsandboxed program has a workdir (a temporary folder): the sandbox makes its own home.
            env: dict[str, str] = {} if workdir is None else {**SANDBOX_ENV, "HOME": workdir, "TMPDIR": workdir}
            proc = await asyncio.create_subprocess_exec(
                *self._command(status_write, program_fd, seccomp_fd, uid), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, pass_fds=passed_fds,
                env=env, cwd=workdir or "/", start_new_session=True)
        except OSError as exc:
            os.close(status_read)
            return ExecutionResult(SANDBOX_DENIED, f"cannot run {self._bwrap or self._python}: {exc}", "",
                                   time.monotonic() - started, self.sandboxed)
        finally:
            for fd in passed_fds:
                os.close(fd)
        transport, status = await _pipe_reader(status_read)
        try:
            return await self._supervise(proc, status, nonce, started)
        finally:
            transport.close()

    async def _supervise(self, proc: asyncio.subprocess.Process, status: asyncio.StreamReader, nonce: bytes,
                         started: float) -> ExecutionResult:
        over_limit = asyncio.Event()
        output = asyncio.create_task(self._capture(proc, over_limit))
        status_bytes = asyncio.create_task(_read_capped(status, STATUS_CAP_BYTES))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), self.limits.timeout_s)
            except asyncio.TimeoutError:
                timed_out = not over_limit.is_set()
                _kill(proc)
                await proc.wait()
            duration = time.monotonic() - started
            if not self.sandboxed:
                # Children that outlived the program (a sandbox's pid namespace ends them itself). Pids are handed
                # out in a cycle, so the just-freed group id is not someone else's yet.
                signal_group(proc.pid, signal.SIGKILL)
            await asyncio.wait({output, status_bytes}, timeout=DRAIN_GRACE_S)
        finally:
            _kill(proc)  # cancelled while the program still runs
            output.cancel()
            status_bytes.cancel()
        tail = output.result() if output.done() and not output.cancelled() else b""
        reported = status_bytes.result() if status_bytes.done() and not status_bytes.cancelled() else b""
        was_started, report = _parse_status(reported, nonce)
        assert proc.returncode is not None, "the process has been waited for"
        end = ProcessEnd(returncode=proc.returncode, started=was_started, report=report, timed_out=timed_out,
                         output_over_limit=over_limit.is_set())
        outcome, detail = classify(end, self.limits.timeout_s, self.limits.max_output_bytes)
        return ExecutionResult(outcome, detail, tail.decode("utf-8", errors="replace"), duration, self.sandboxed)

    async def _capture(self, proc: asyncio.subprocess.Process, over_limit: asyncio.Event) -> bytes:
        """Read the output to its end, keeping the tail; past the cap, kill the group (and keep draining)."""
        tail, total = bytearray(), 0
        assert proc.stdout is not None, "started with stdout=PIPE"
        while chunk := await proc.stdout.read(_CHUNK):
            total += len(chunk)
            tail += chunk
            del tail[:-OUTPUT_TAIL_BYTES]
            if total > self.limits.max_output_bytes and not over_limit.is_set():
                over_limit.set()
                _kill(proc)
        return bytes(tail)


async def _read_capped(reader: asyncio.StreamReader, cap: int) -> bytes:
    kept = bytearray()
    while chunk := await reader.read(_CHUNK):
        kept += chunk[: max(0, cap - len(kept))]
    return bytes(kept)

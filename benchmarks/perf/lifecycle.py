"""Benchmarks and scripts stop what they started, however they end (SIGTERM, SIGINT, SIGHUP, an exception).

Python's default SIGTERM kills the interpreter without running `finally` blocks, so a benchmark killed that way
left its vLLM (started in a session of its own) running. `exit_on_signals` turns those signals into SystemExit, and
`child_process` starts a server in its own session tagged with a token in its environment: stopping it signals the
session, then any process still carrying the token (grandchildren that moved to another session, such as Ray's).
"""

import os
import signal
import subprocess
import time
import uuid
from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

TOKEN_VAR = "NEMO_GYM_BENCH_CHILD"
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def exit_on_signals() -> None:
    """The first SIGTERM/SIGINT/SIGHUP raises SystemExit(128 + signal) in the main thread; later ones are ignored
    so that a second Ctrl-C cannot interrupt the cleanup the first one started."""

    def stop(signum: int, frame: object) -> None:
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    for sig in _SIGNALS:
        signal.signal(sig, stop)


def _tagged(token: str) -> list[int]:
    """Pids of live processes whose environment carries `token` (only ours can be read)."""
    prefix = f"{TOKEN_VAR}=".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                tags = next((v[len(prefix):] for v in environ.read().split(b"\0") if v.startswith(prefix)), b"")
        except OSError:
            continue
        if token.encode() in tags.split(b":"):
            pids.append(int(entry))
    return pids


def _signal_all(pgid: int, pids: list[int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_tree(popen: subprocess.Popen, token: str, grace_s: float) -> None:
    """SIGTERM the child's session and every tagged process; SIGKILL what is left after `grace_s`."""
    _signal_all(popen.pid, _tagged(token), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if popen.poll() is not None and not _tagged(token):
            return
        time.sleep(0.2)
    _signal_all(popen.pid, _tagged(token), signal.SIGKILL)
    popen.wait()


@contextmanager
def child_process(args: Sequence[str], *, env: Mapping[str, str] | None = None, grace_s: float = 60.0,
                  **popen_kwargs: object) -> Iterator[subprocess.Popen]:
    """Start `args` in a session of its own; on leaving (normally, by exception or by a signal turned into
    SystemExit) stop it and everything it started."""
    token = uuid.uuid4().hex
    base = os.environ if env is None else env
    # Tokens accumulate, so an outer benchmark runner still finds what its benchmark's own children started.
    child_env = {**base, TOKEN_VAR: ":".join(filter(None, (base.get(TOKEN_VAR), token)))}
    popen = subprocess.Popen(list(args), env=child_env, start_new_session=True,  # type: ignore[call-overload]
                             **popen_kwargs)
    try:
        yield popen
    finally:
        stop_tree(popen, token, grace_s)


def run_child(args: Sequence[str], *, timeout_s: float, grace_s: float = 60.0, merge_stderr: bool = False,
              **popen_kwargs: object) -> subprocess.CompletedProcess:
    """`subprocess.run` with captured text output, but a timeout, an exception or a signal stops the child's whole
    tree through `child_process` (subprocess.run kills only the child itself)."""
    stderr = subprocess.STDOUT if merge_stderr else subprocess.PIPE
    with child_process(args, grace_s=grace_s, stdout=subprocess.PIPE, stderr=stderr, text=True,
                       **popen_kwargs) as popen:
        stdout, stderr = popen.communicate(timeout=timeout_s)
    return subprocess.CompletedProcess(list(args), popen.returncode, stdout, stderr)

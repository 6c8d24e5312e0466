"""Runs inside the sandbox, before and around the untrusted program: standard library only.

Started as `python -I -u -c <this file's text> ARGS`, ARGS being STATUS_FD INPUT_FD CPU_S MEMORY_BYTES
MAX_PROCESSES FILE_BYTES OPEN_FILES UID. It reads `<nonce>\\n<program>` from INPUT_FD, sets the resource limits,
drops to UID unless it is -1 (a root server's bwrap starts it as root, and RLIMIT_NPROC does not bind root), then
runs the program as `__main__` and reports on STATUS_FD, in lines that start with the nonce: `started` once the
limits hold, then `{"outcome": ..., "detail": ...}` from the main process only.

A program that ends the process itself (`os._exit(0)`, a signal) never reports, so it cannot pass: the host treats
a missing report as a crash. `sys.exit()` inside the program is an exception like any other and fails it; a report
line forged without the nonce is ignored. This stops early exits, not a program set on faking a pass from inside
the same interpreter (an object equal to everything does that too): the sandbox guards the machine, not the reward.
"""

import json
import linecache
import os
import resource
import sys
import traceback
import types

PROGRAM_NAME = "program.py"


def _set_limits(cpu_s: int, memory_bytes: int, max_processes: int, file_bytes: int, open_files: int) -> None:
    # Soft CPU limit: SIGXCPU; the hard one a second later is SIGKILL, for a program that ignores SIGXCPU.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    # With the file size, bounds the memory in memfds and pipes, which the address-space limit does not count.
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _print_traceback(exc: BaseException) -> None:
    """The traceback from the program's first frame on (the launcher's own frame is noise)."""
    frames = exc.__traceback__
    traceback.print_exception(type(exc), exc, frames.tb_next if frames else None)


def _run(source: str) -> tuple[str, str]:
    """Run the program as `__main__`; (outcome, detail) as the launcher reports them."""
    linecache.cache[PROGRAM_NAME] = (len(source), None, source.splitlines(True), PROGRAM_NAME)
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    try:
        exec(compile(source, PROGRAM_NAME, "exec"), module.__dict__)
    except MemoryError as exc:
        _print_traceback(exc)
        return "memory", "MemoryError"
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt fail the program as well
        _print_traceback(exc)
        return "failed", f"{type(exc).__name__}: {exc}"[:500]
    return "passed", ""


def main() -> None:
    status_fd, input_fd, cpu_s, memory_bytes, max_processes, file_bytes, open_files, uid = (
        int(arg) for arg in sys.argv[1:9])
    with os.fdopen(input_fd, "rb") as source_file:
        nonce, source = source_file.read().split(b"\n", 1)
    _set_limits(cpu_s, memory_bytes, max_processes, file_bytes, open_files)
    if uid >= 0:
        _drop_to(uid)
    main_pid = os.getpid()
    os.write(status_fd, nonce + b" started\n")
    outcome, detail = _run(source.decode("utf-8", errors="replace"))
    if os.getpid() != main_pid:
        os._exit(0)  # a forked copy of the program returned here: only the main process reports
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(status_fd, nonce + b" " + json.dumps({"outcome": outcome, "detail": detail}).encode() + b"\n")
    # Skip interpreter shutdown: the program's threads and atexit hooks must not outlive its verdict.
    os._exit(0 if outcome == "passed" else 1)


if __name__ == "__main__":
    main()

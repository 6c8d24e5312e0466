"""How one execution ended: what the host saw of the process, and the outcome it is recorded as.

Only the launcher inside the sandbox can say passed, failed or memory, and only after its limits held; everything
else is judged from outside: the wall clock, the output cap, the exit status, a missing report.
"""

import signal
from dataclasses import dataclass
from typing import Optional

PASSED = "passed"
FAILED = "failed"  # an assertion or any other exception, `sys.exit()` included
TIMEOUT = "timeout"  # the wall clock or the CPU limit
MEMORY = "memory"  # MemoryError under the address-space limit
CRASHED = "crashed"  # killed by a signal, over the output cap, or ended without reporting
SANDBOX_DENIED = "sandbox-denied"  # the sandbox could not start, or refused to set the program's limits
OUTCOMES = (PASSED, FAILED, TIMEOUT, MEMORY, CRASHED, SANDBOX_DENIED)

# bwrap exits with 128 + N when the program dies of signal N; a direct child shows as -N.
_SIGNAL_EXIT_BASE = 128


@dataclass(frozen=True)
class ProcessEnd:
    """What the host observed of one execution."""

    returncode: int
    started: bool  # the launcher announced that its limits hold
    report: Optional[tuple[str, str]]  # (outcome, detail) from the launcher's main process
    timed_out: bool  # killed by us at the wall-clock deadline
    output_over_limit: bool  # killed by us at the output cap


@dataclass(frozen=True)
class ExecutionResult:
    outcome: str
    detail: str
    output_tail: str
    duration_s: float
    sandboxed: bool


def signal_of(returncode: int) -> Optional[int]:
    if returncode < 0:
        return -returncode
    if returncode > _SIGNAL_EXIT_BASE and returncode - _SIGNAL_EXIT_BASE < signal.NSIG:
        return returncode - _SIGNAL_EXIT_BASE
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify(end: ProcessEnd, timeout_s: float, max_output_bytes: int) -> tuple[str, str]:
    """(outcome, detail) of one execution."""
    if end.output_over_limit:
        return CRASHED, f"output over max_output_bytes ({max_output_bytes}); the program was killed"
    if end.timed_out:
        return TIMEOUT, f"wall clock over timeout_s ({timeout_s:g} s); the program was killed"
    if not end.started:
        return SANDBOX_DENIED, f"the sandbox did not start the program (exit status {end.returncode})"
    if end.report is not None and (end.report[0] != PASSED or end.returncode == 0):
        return end.report
    number = signal_of(end.returncode)
    if number == signal.SIGXCPU:
        return TIMEOUT, "CPU time over the limit (SIGXCPU)"
    if number is not None:
        return CRASHED, f"killed by {_signal_name(number)}"
    return CRASHED, f"exited with status {end.returncode} before reporting a result"

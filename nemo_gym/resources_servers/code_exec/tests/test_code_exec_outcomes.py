"""How an execution's end is recorded: the launcher's report where it gave one, else what the host saw."""

import pytest

from nemo_gym.resources_servers.code_exec.outcomes import ProcessEnd, classify


def _end(returncode: int = 0, started: bool = True, report: tuple[str, str] | None = None, timed_out: bool = False,
         over: bool = False) -> ProcessEnd:
    return ProcessEnd(returncode=returncode, started=started, report=report, timed_out=timed_out,
                      output_over_limit=over)


@pytest.mark.parametrize(("end", "outcome", "detail"), [
    (_end(report=("passed", "")), "passed", ""),
    (_end(1, report=("failed", "AssertionError: ")), "failed", "AssertionError: "),
    (_end(1, report=("memory", "MemoryError")), "memory", "MemoryError"),
    (_end(137, report=("passed", "")), "crashed", "killed by SIGKILL"),  # reported, then did not exit cleanly
    (_end(137, timed_out=True), "timeout", "wall clock over timeout_s (3 s)"),
    (_end(137, timed_out=True, over=True), "crashed", "output over max_output_bytes (100)"),
    (_end(128 + 24), "timeout", "CPU time over the limit (SIGXCPU)"),  # bwrap's status for SIGXCPU
    (_end(-11), "crashed", "killed by SIGSEGV"),  # a direct child's status
    (_end(0), "crashed", "exited with status 0 before reporting a result"),
    (_end(1, started=False), "sandbox-denied", "the sandbox did not start the program (exit status 1)"),
])
def test_classify(end: ProcessEnd, outcome: str, detail: str) -> None:
    got_outcome, got_detail = classify(end, timeout_s=3.0, max_output_bytes=100)
    assert got_outcome == outcome and got_detail.startswith(detail)

"""Where bwrap cannot start, code_exec refuses to start and says why and what to do, unless allow_unsandboxed is
set: then it runs programs without the sandbox and says so in every verify response."""

from pathlib import Path

import pytest

from nemo_gym.resources_servers.code_exec.tests.code_exec_support import (
    CHECK_TRUE, PASSING_CODE, code_exec_stack, code_row, verify,
)

# Fault injection: a bwrap that fails the way it does on a machine without user namespaces.
FAILING_BWRAP = "#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n"
OVERRIDE = "+code_exec_test.resources_servers.code_exec.allow_unsandboxed=true"


@pytest.fixture
def failing_bwrap(tmp_path: Path) -> Path:
    path = tmp_path / "bwrap"
    path.write_text(FAILING_BWRAP)
    path.chmod(0o755)
    return path


def _refusal(workdir: Path, bwrap_path: str) -> str:
    with pytest.raises(RuntimeError) as refused:
        with code_exec_stack(workdir, bwrap_path=bwrap_path):
            pass
    return str(refused.value)


def test_refuses_to_start_when_bwrap_fails(tmp_path: Path, failing_bwrap: Path) -> None:
    log = _refusal(tmp_path, str(failing_bwrap))
    assert "the bwrap sandbox cannot start (sandbox-denied" in log
    assert "No permissions to create a new namespace" in log  # the cause, from bwrap itself
    assert "unprivileged user namespaces" in log and OVERRIDE in log  # the fixes


def test_refuses_to_start_without_a_bwrap_binary(tmp_path: Path) -> None:
    log = _refusal(tmp_path, "/nonexistent/bwrap")
    assert "cannot run /nonexistent/bwrap" in log and OVERRIDE in log


def test_allow_unsandboxed_runs_programs_and_says_so(tmp_path: Path, failing_bwrap: Path) -> None:
    with code_exec_stack(tmp_path, bwrap_path=str(failing_bwrap), allow_unsandboxed=True, timeout_s=5) as stack:
        passed = verify(stack, code_row(PASSING_CODE))
        failed = verify(stack, code_row("def solve():\n    return False\n", test=CHECK_TRUE))
        slow = verify(stack, code_row("def solve():\n    while True:\n        pass\n"))
        log = next(Path(tmp_path).glob("ng_logs/*/code_exec_test.log")).read_text()
    assert (passed["reward"], passed["outcome"], passed["sandboxed"]) == (1.0, "passed", False)
    assert (failed["reward"], failed["outcome"], failed["sandboxed"]) == (0.0, "failed", False)
    assert (slow["reward"], slow["outcome"], slow["sandboxed"]) == (0.0, "timeout", False)
    assert "programs run WITHOUT a sandbox" in log

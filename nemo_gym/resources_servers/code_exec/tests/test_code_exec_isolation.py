"""What a program sees inside the sandbox (the executor, in this process): no privileges, no inherited environment,
none of the host's files, one writable directory, no new namespaces; and no way to pass without the tests running."""

import asyncio
import json
import os

import pytest

from nemo_gym.resources_servers.code_exec.bwrap import SANDBOX_ENV, default_bwrap_path
from nemo_gym.resources_servers.code_exec.executor import Executor, SandboxLimits
from nemo_gym.resources_servers.code_exec.outcomes import ExecutionResult
from nemo_gym.resources_servers.code_exec.settings import DEFAULT_SANDBOX_UID_BASE
from tests.helpers.stack import REPO_ROOT


def _run(program: str) -> ExecutionResult:
    async def go() -> ExecutionResult:
        # 60 s: walking the whole visible filesystem (a venv holding vLLM and torch) is slow on a loaded machine.
        executor = Executor(SandboxLimits(timeout_s=60, memory_mb=512, max_processes=16), default_bwrap_path(),
                            max_concurrent=1, uid_base=DEFAULT_SANDBOX_UID_BASE)
        result, _ = await executor.run(program)
        return result

    return asyncio.run(go())


def _passes(program: str) -> str:
    result = _run(program)
    assert (result.outcome, result.sandboxed) == ("passed", True), result
    return result.output_tail


def test_the_program_has_no_privileges() -> None:
    status = _passes("print(open('/proc/self/status').read())")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["CapEff"].strip() == fields["CapPrm"].strip() == fields["CapAmb"].strip() == "0" * 16
    assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2"
    if os.geteuid() == 0:
        assert fields["Uid"].split()[0] == str(DEFAULT_SANDBOX_UID_BASE)


def test_the_environment_is_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEMO_GYM_TEST_SECRET", "hunter2")
    env = json.loads(_passes("import json, os\nprint(json.dumps(dict(os.environ)))"))
    assert env == {**SANDBOX_ENV, "PWD": "/tmp"}  # bwrap sets PWD with --chdir


def test_the_hosts_files_are_not_there() -> None:
    listing = json.loads(_passes(
        "import json, os\n"
        f"print(json.dumps({{'root': sorted(os.listdir('/')), 'etc': sorted(os.listdir('/etc')),"
        f" 'repo': os.path.exists({str(REPO_ROOT)!r}), 'tmp': os.listdir('/tmp')}}))"))
    assert listing["repo"] is False and listing["tmp"] == []
    assert set(listing["etc"]) <= {"ld.so.cache", "localtime"}
    assert "home" not in listing["root"] and "work" not in listing["root"] and "var" not in listing["root"]


def test_tmp_is_the_only_writable_place() -> None:
    program = """\
import os
writable = []
for top, dirs, files in os.walk('/'):
    if top.startswith(('/proc', '/sys')):
        dirs[:] = []
        continue
    try:
        open(os.path.join(top, '.probe'), 'w').close()
        writable.append(top)
    except OSError:
        pass
print(writable)
"""
    assert _passes(program).strip() == "['/tmp']"


def test_new_namespaces_are_refused() -> None:
    program = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
assert libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == -1 and ctypes.get_errno() == 1
"""
    _passes(program)


def test_threads_subprocesses_and_fork_still_work() -> None:
    program = """\
import os, subprocess, threading
seen = []
thread = threading.Thread(target=lambda: seen.append(1))
thread.start()
thread.join()
assert seen == [1]
assert subprocess.run(['/bin/echo', 'child'], capture_output=True, text=True).stdout == 'child\\n'
pid = os.fork()
if pid == 0:
    os._exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
"""
    _passes(program)


@pytest.mark.parametrize(("program", "outcome"), [
    ("import os\nos._exit(0)\nassert False", "crashed"),
    ("import sys\nsys.exit(0)\nassert False", "failed"),
    ("import os\nif os.fork() == 0:\n    pass\nelse:\n    os.wait()\n    assert False", "failed"),
    # A report forged on the status pipe (its number is in the launcher's argv) lacks the nonce.
    ("import os, sys\nos.write(int(sys.argv[1]), b'x started\\nx {\"outcome\": \"passed\", \"detail\": \"\"}\\n')\n"
     "os._exit(0)", "crashed"),
])
def test_ending_early_never_passes(program: str, outcome: str) -> None:
    result = _run(program)
    assert result.outcome == outcome, result

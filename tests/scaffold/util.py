"""Run `ng_init_resources_server` and the other ng_* commands as subprocesses, the way a user does."""

import subprocess
import sys
from pathlib import Path


def ng(command: str, args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`ng_<command> ARGS` in `cwd`, run with this interpreter (command = the module under nemo_gym.cli)."""
    return subprocess.run([sys.executable, "-c", f"from nemo_gym.cli.{command} import main; main()", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)


def init_environment(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    result = ng("init_resources_server", list(args), cwd)
    assert result.returncode == 0, result.stderr
    return result

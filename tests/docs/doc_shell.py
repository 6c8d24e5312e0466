"""Run a documentation block's commands as a reader would, in a scratch folder laid out like the checkout.

A command the docs say stays in the foreground (`ng_serve_vllm`, `ng_run`: "run each in its own terminal") is
started in the background and waited for until it says it is ready; the block's later commands run meanwhile, and
the foreground ones are stopped with Ctrl-C (SIGINT) at the end, which must exit 0. Every other command must exit 0.

The only changes to a command as written are the substitutions a test names (a URL, a port, a placeholder) and
`+head_server.port=<free port>` on every command that starts or finds servers: the machine is shared, and the default
head port may be another run's.
"""

import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs.doc_blocks import DocBlock
from tests.helpers.processes import OutputReader, stop_process_group
from tests.helpers.stack import REPO_ROOT

# What a foreground command prints once it is ready for the next one.
READY = {"ng_serve_vllm": b"vLLM serves ", "ng_run": b"all servers healthy; Ctrl-C to stop\n"}
HEAD_COMMANDS = ("ng_run", "ng_collect_rollouts", "ng_e2e_collect_rollouts", "ng_status", "ng_aggregate_rollouts")
# What the docs' relative paths need from the checkout; outputs (results/, ng_logs/) stay in the scratch folder.
CHECKOUT_ENTRIES = ("nemo_gym", "configs", "models", "scripts", "benchmarks", "env.yaml.example")
COMMAND_TIMEOUT_S = 900.0  # a vLLM cold start on a loaded 2-core machine


def checkout_like(folder: Path) -> Path:
    """`folder` with links to the checkout's entries the docs' commands name."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in CHECKOUT_ENTRIES:
        (folder / entry).symlink_to(REPO_ROOT / entry)
    return folder


@dataclass
class DocShell:
    workdir: Path
    head_port: int
    substitutions: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)  # command as run -> what it printed

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}

    def command_line(self, command: str) -> str:
        for old, new in self.substitutions.items():
            command = command.replace(old, new)
        if shlex.split(command)[0] in HEAD_COMMANDS:
            command += f" +head_server.port={self.head_port}"
        return command

    def run(self, block: DocBlock) -> None:
        """Every command of `block` in order; fails the test naming the command and its output."""
        foreground: list[tuple[str, subprocess.Popen, OutputReader]] = []
        try:
            for command in map(self.command_line, block.commands):
                ready = READY.get(shlex.split(command)[0])
                if ready is None:
                    self._run_to_end(command)
                    continue
                popen = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.workdir, env=self.env,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
                output = OutputReader(popen)
                foreground.append((command, popen, output))
                if not output.wait_for(ready, COMMAND_TIMEOUT_S):
                    pytest.fail(f"{block.page}:{block.line}: `{command}` never said {ready!r}:\n{output.text[-6000:]}")
        finally:
            for command, popen, output in reversed(foreground):
                popen.send_signal(signal.SIGINT)  # Ctrl-C in its terminal
                try:
                    popen.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    stop_process_group(popen, grace_s=30)
                self.outputs[command] = output.text
        for command, popen, output in foreground:
            assert popen.returncode == 0, f"`{command}` exited {popen.returncode} on Ctrl-C:\n{output.text[-4000:]}"

    def _run_to_end(self, command: str) -> None:
        done = subprocess.run(["bash", "-c", command], cwd=self.workdir, env=self.env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
        self.outputs[command] = done.stdout + done.stderr
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{(done.stdout + done.stderr)[-6000:]}"

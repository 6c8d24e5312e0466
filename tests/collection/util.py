"""Helpers for the collection tests: stack configs, input files, running the CLIs as real subprocesses."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import yaml

from tests.helpers.stack import REPO_ROOT

FAULT_AGENT = Path(__file__).parent / "apps" / "fault_agent.py"


def stack_config(path: Path, agents: dict[str, dict[str, Any]]) -> Path:
    """A config with one fault-agent instance per entry: {instance name: settings}."""
    tree = {
        name: {"responses_api_agents": {"fault_agent": {"entrypoint": str(FAULT_AGENT), **settings}}}
        for name, settings in agents.items()
    }
    path.write_text(yaml.safe_dump(tree))
    return path


def write_rows(path: Path, n: int, **extra: Any) -> Path:
    rows = [
        {"responses_create_params": {"input": [{"role": "user", "content": f"question {i}"}]}, "q": i, **extra}
        for i in range(n)
    ]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def keys(path: Path) -> list[tuple[int, int]]:
    return [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in read_rows(path)]


def sidecar(output: Path, suffix: str) -> Path:
    return output.with_name(output.stem + suffix)


def cli(command: str, args: list[str]) -> list[str]:
    """argv running one of our console scripts with this interpreter (no reinstall needed for new scripts)."""
    return [sys.executable, "-c", f"from nemo_gym.cli.{command} import main; main()", *args]


def run_cli(command: str, args: list[str], cwd: Path, timeout: float = 120, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    return subprocess.run(
        cli(command, args), cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
    )


def head_args(head_url: str) -> list[str]:
    return [f"+head_server.port={head_url.rsplit(':', 1)[1]}"]

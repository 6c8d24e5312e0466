"""Shared by the code_exec tests: a real `ng_run` stack serving one code_exec instance, and verify calls to it."""

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx
import orjson
import psutil

from nemo_gym.resources_servers.code_exec.settings import DEFAULT_SANDBOX_UID_BASE
from tests.helpers.stack import Stack, running_stack

SERVER = "code_exec_test"
# Returns True; `check` wants exactly that.
PASSING_CODE = "def solve():\n    return True\n"
CHECK_TRUE = "def check(candidate):\n    assert candidate() is True\n"
# Inside a sandbox, a program that waits for this file holds its slot until the test `release`s it.
GATE = "/tmp/go"
GATED_PASS = ("def solve():\n    import os, time\n"
              f"    while not os.path.exists({GATE!r}):\n        time.sleep(0.01)\n    return True\n")


@contextmanager
def code_exec_stack(workdir: Path, **settings: Any) -> Iterator[Stack]:
    """`ng_run` with one code_exec instance named SERVER and these settings."""
    config = {SERVER: {"resources_servers": {"code_exec": settings}}}
    path = workdir / "code_exec_test.yaml"
    path.write_bytes(orjson.dumps(config))  # JSON is valid YAML
    with running_stack([f"+config_paths=[{path}]"], cwd=workdir) as stack:
        yield stack


def message(text: str) -> dict[str, Any]:
    """A Responses API response whose final message is `text`."""
    return {"output": [{"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}]}


def code_row(code: str, test: str = CHECK_TRUE, entry_point: str = "solve", prompt: str = "") -> dict[str, Any]:
    """A verify body: the model answered `code` in a ```python block."""
    return {"prompt": prompt, "test": test, "entry_point": entry_point,
            "response": message(f"Here it is:\n```python\n{code}```\n")}


def verify(stack: Stack, body: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
    reply = httpx.post(f"{stack.url(SERVER)}/verify", json=body, timeout=timeout_s, trust_env=False)
    assert reply.status_code == 200, reply.text
    return reply.json()


def assert_still_serving(stack: Stack) -> None:
    """The server is healthy and scores a correct program 1."""
    health = httpx.get(f"{stack.url(SERVER)}/health", timeout=10, trust_env=False)
    assert health.status_code == 200, health.text
    result = verify(stack, code_row(PASSING_CODE))
    assert (result["reward"], result["outcome"], result["sandboxed"]) == (1.0, "passed", True), result


def sandbox_processes() -> list[psutil.Process]:
    """Live processes running as a sandbox uid (root's sandboxes run programs as DEFAULT_SANDBOX_UID_BASE + slot)."""
    found = []
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]
        if uids is not None and uids.real >= DEFAULT_SANDBOX_UID_BASE:
            found.append(proc)
    return found


def running_programs(stack: Stack) -> set[int]:
    """Pids of the programs the stack's sandboxes run now: the launcher's interpreter (`python -I -u -c ...`) runs
    the program itself."""
    found = set()
    for proc in psutil.Process(stack.popen.pid).children(recursive=True):
        try:
            if proc.cmdline()[1:4] == ["-I", "-u", "-c"] and proc.status() != psutil.STATUS_ZOMBIE:
                found.add(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def sandbox_path(pid: int, path: str) -> Path:
    """`path` inside the sandbox of program `pid`, as the host sees it (through /proc/<pid>/root)."""
    return Path(f"/proc/{pid}/root{path}")


def release(pid: int) -> None:
    """Let the GATED program `pid` finish (one that has ended already, by its time limit, needs nothing)."""
    try:
        sandbox_path(pid, GATE).touch()
    except FileNotFoundError:
        pass

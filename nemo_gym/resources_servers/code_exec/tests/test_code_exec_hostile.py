"""Hostile programs against a real `ng_run` stack serving code_exec: each one scores 0 with its recorded outcome,
within its limit, leaves nothing running, and the server goes on to score the next correct program 1."""

import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.helpers.stack import REPO_ROOT, Stack
from nemo_gym.resources_servers.code_exec.tests.code_exec_support import (
    GATE, SERVER, assert_still_serving, code_exec_stack, code_row, release, running_programs, sandbox_path,
    sandbox_processes, verify,
)

TIMEOUT_S = 5.0
MAX_PROCESSES = 16
MAX_OUTPUT_BYTES = 1 << 20
SLACK_S = 2.0  # bwrap and interpreter start-up, a busy 2-core machine


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with code_exec_stack(tmp_path_factory.mktemp("code_exec_hostile"), timeout_s=TIMEOUT_S, memory_mb=512,
                         max_processes=MAX_PROCESSES, max_output_bytes=MAX_OUTPUT_BYTES, max_concurrent=4) as running:
        yield running


def _report(name: str, result: dict[str, Any]) -> None:
    print(f"\n{name}: reward {result['reward']} outcome {result['outcome']} in {result['duration_s']:.2f} s "
          f"({result['outcome_detail']})")


def test_infinite_loop_times_out(stack: Stack) -> None:
    result = verify(stack, code_row("def solve():\n    while True:\n        pass\n"))
    _report("infinite loop", result)
    assert (result["reward"], result["outcome"]) == (0.0, "timeout")
    assert TIMEOUT_S <= result["duration_s"] <= TIMEOUT_S + SLACK_S
    assert sandbox_processes() == []
    assert_still_serving(stack)


FORK_PROBE = """\
def solve():
    import os, time
    children, refused = [], 0
    for _ in range(40):
        try:
            pid = os.fork()
        except OSError:
            refused += 1
            continue
        if pid == 0:
            time.sleep(1)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    print("forked", len(children), "refused", refused)
    return True
"""

FORK_BOMB = """\
def solve():
    import os
    while True:
        try:
            os.fork()
        except OSError:
            pass
"""


def test_fork_bomb_is_contained(stack: Stack) -> None:
    # A bounded probe first: the real bomb only runs once the process limit is seen to hold.
    probe = verify(stack, code_row(FORK_PROBE))
    assert probe["outcome"] == "passed", probe
    forked, refused = (int(word) for word in probe["output_tail"].split()[1::2])
    if forked >= MAX_PROCESSES or refused == 0:
        pytest.fail(f"the process limit does not hold (forked {forked} of 40): not running the fork bomb")

    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], len(sandbox_processes()))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = verify(stack, code_row(FORK_BOMB))
    finally:
        stop.set()
        watcher.join()
    _report("fork bomb", result)
    print(f"fork bomb: at most {peak[0]} sandbox processes at once (limit {MAX_PROCESSES})")
    assert (result["reward"], result["outcome"]) == (0.0, "timeout")
    assert TIMEOUT_S <= result["duration_s"] <= TIMEOUT_S + SLACK_S
    assert 1 < peak[0] <= MAX_PROCESSES
    assert sandbox_processes() == []
    assert_still_serving(stack)


def test_ten_gigabyte_allocation_is_a_memory_error(stack: Stack) -> None:
    result = verify(stack, code_row("def solve():\n    block = bytearray(10 * 1024**3)\n    return len(block) > 0\n"))
    _report("10 GB allocation", result)
    assert (result["reward"], result["outcome"]) == (0.0, "memory")
    assert result["output_tail"].rstrip().endswith("MemoryError")
    assert result["duration_s"] <= SLACK_S
    assert_still_serving(stack)


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on the host's 127.0.0.1 that greets and records every connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # a blocked accept() would not notice the end of the test
    greeted: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"hello")
                greeted.append(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], greeted
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_loopback_server_of_the_host_is_unreachable(stack: Stack, loopback_server: tuple[int, list[bytes]]) -> None:
    port, greeted = loopback_server
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:  # reachable from the host
        assert conn.recv(5) == b"hello"
    code = (f"def solve():\n    import socket\n"
            f"    with socket.create_connection(('127.0.0.1', {port}), timeout=2) as conn:\n"
            f"        return conn.recv(5) == b'hello'\n")
    result = verify(stack, code_row(code))
    _report("connect to the host's loopback server", result)
    assert (result["reward"], result["outcome"]) == (0.0, "failed")
    assert "ConnectionRefusedError" in result["outcome_detail"]
    assert result["duration_s"] <= SLACK_S
    assert greeted == [b"hello"]  # only the test's own connection
    assert_still_serving(stack)


def test_writes_outside_the_sandbox_directory_fail(stack: Stack, tmp_path: Path) -> None:
    name = f"nemo_gym_probe_{uuid.uuid4().hex}"
    outside = ["/etc/" + name, str(REPO_ROOT / name), str(tmp_path / name), "/usr/" + name, "/" + name,
               "/dev/shm/" + name, "/var/tmp/" + name]
    host_tmp = "/tmp/" + name  # inside: the sandbox's own /tmp, which must not be the host's
    code = (f"def solve():\n    import json\n    results = {{}}\n"
            f"    for path in {outside + [host_tmp]!r}:\n"
            f"        try:\n            with open(path, 'w') as file:\n                file.write('x')\n"
            f"            results[path] = 'written'\n"
            f"        except OSError as exc:\n            results[path] = type(exc).__name__\n"
            f"    print(json.dumps(results))\n"
            f"    return all(results[path] == 'written' for path in results)\n")
    result = verify(stack, code_row(code))
    _report("write outside the sandbox directory", result)
    assert (result["reward"], result["outcome"]) == (0.0, "failed")
    written = json.loads(result["output_tail"].splitlines()[0])
    assert [path for path in outside if written[path] == "written"] == []
    assert written[host_tmp] == "written"
    assert not any(Path(path).exists() for path in outside + [host_tmp])
    assert_still_serving(stack)


SECRET_FILE = "/tmp/problem_a/secret.txt"
# Holds its secret file until the test releases it, and passes only if the file was still there then.
SECRET_WRITER = f"""\
def solve():
    import os, time
    os.makedirs('/tmp/problem_a', exist_ok=True)
    with open('{SECRET_FILE}', 'w') as file:
        file.write('SECRET-%s')
    while not os.path.exists('{GATE}'):
        time.sleep(0.01)
    return os.path.exists('{SECRET_FILE}')
"""

SECRET_READER = """\
def solve():
    import os
    for top in ('/tmp', '/dev', '/var', '/run', '/root', '/home', '/proc'):
        for root, dirs, files in os.walk(top):
            if root.count('/') > 4:
                dirs[:] = []
            if 'secret.txt' in files:
                return open(os.path.join(root, 'secret.txt')).read()
    print('no secret found')
    return None
"""


def test_another_problems_files_are_invisible(stack: Stack) -> None:
    secret = uuid.uuid4().hex
    reader_check = "def check(candidate):\n    assert (candidate() or '').startswith('SECRET-')\n"
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(verify, stack, code_row(SECRET_WRITER % secret))
        # Overlap by construction: the reader runs after the writer's file exists and before the writer may end.
        deadline = time.monotonic() + 60  # against a hang only
        while not (pids := running_programs(stack)) or not sandbox_path(min(pids), SECRET_FILE).exists():
            assert time.monotonic() < deadline and not writer.done(), "the writer never wrote its file"
            time.sleep(0.05)
        (writer_pid,) = pids
        try:
            read = verify(stack, code_row(SECRET_READER, test=reader_check))
        finally:
            release(writer_pid)
        written = writer.result()
    _report("read another problem's files (writer)", written)
    _report("read another problem's files (reader)", read)
    assert (written["reward"], written["outcome"]) == (1.0, "passed")  # it held the file until the reader was done
    assert (read["reward"], read["outcome"]) == (0.0, "failed")
    assert "no secret found" in read["output_tail"] and secret not in read["output_tail"]
    assert read["duration_s"] <= TIMEOUT_S
    assert_still_serving(stack)


def test_printing_100_megabytes_is_cut_at_the_output_cap(stack: Stack) -> None:
    code = "def solve():\n    for _ in range(100_000):\n        print('x' * 1000)\n    return True\n"
    result = verify(stack, code_row(code))
    _report("print 100 MB", result)
    assert (result["reward"], result["outcome"]) == (0.0, "crashed")
    assert "max_output_bytes" in result["outcome_detail"]
    assert 0 < len(result["output_tail"]) <= 4096 and set(result["output_tail"]) <= {"x", "\n"}
    assert result["duration_s"] <= SLACK_S
    assert sandbox_processes() == []
    assert_still_serving(stack)


@pytest.mark.parametrize(("change", "says"), [
    ({"test": None}, "the row has no 'test'"),
    ({"entry_point": ""}, "the row has no 'entry_point'"),
    ({"entry_point": "solve); import os; os.system('x'"}, "the row's 'entry_point' must be a Python name"),
    ({"prompt": 3}, "the row's 'prompt' must be a string"),
])
def test_bad_rows_are_refused_naming_the_field(stack: Stack, change: dict[str, Any], says: str) -> None:
    body = {key: value for key, value in {**code_row("def solve():\n    return True\n"), **change}.items()
            if value is not None}
    reply = httpx.post(f"{stack.url(SERVER)}/verify", json=body, timeout=30, trust_env=False)
    assert reply.status_code == 400 and says in reply.json()["error"]["message"], reply.text

"""Servers that share a process (`+colocate_servers=true`, nemo_gym.server.colocated) answer each other as they do
over HTTP: the same replies and failures, a body the callee changes is not the caller's, a deadline still ends a
call that hangs, and each log line names the server that wrote it. Run through ng_run both ways, side by side."""

import signal
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import pytest

from nemo_gym.config.servers import ServerSettings
from nemo_gym.server.base import BaseServer
from nemo_gym.server.colocated import colocated_names
from tests.helpers.stack import REPO_ROOT, free_port, running_stack
from tests.test_ng_run import ECHO_APP, _ng_run, _wait_gone

HOP_APP = REPO_ROOT / "tests" / "helpers" / "hop_app.py"

HOPS = f"""\
caller:
  resources_servers:
    hop:
      entrypoint: {HOP_APP}
      peer: {{type: resources_servers, name: callee}}
callee:
  resources_servers:
    hop:
      entrypoint: {HOP_APP}
"""

CALLS: dict[str, dict[str, Any]] = {
    "echo": {"path": "/echo", "send": {"a": [1, 2], "b": "x"}},
    "refused": {"path": "/refuse", "send": {}},
    "downstream": {"path": "/downstream", "send": {}},
    "bug": {"path": "/bug", "send": {}},
    "not_json": {"path": "/not_json", "send": {}},
    "hangs": {"path": "/hang", "send": {}, "timeout_s": 0.5},
}


def _outcomes(tmp_path: Path, colocate: bool) -> dict[str, Any]:
    workdir = tmp_path / f"colocate_{colocate}"
    workdir.mkdir()
    (workdir / "c.yaml").write_text(HOPS)
    logs = workdir / "logs"
    with running_stack(["+config_paths=[c.yaml]", f"+colocate_servers={str(colocate).lower()}", f"+log_dir={logs}"],
                       workdir) as stack:
        caller = stack.url("caller")
        pids = {name: httpx.get(f"{url}/health", trust_env=False).json()["pid"] for name, url in stack.servers().items()}
        out = {name: httpx.post(f"{caller}/call", json=call, trust_env=False, timeout=30).json()
               for name, call in CALLS.items()}
        # In process, the caller's deadline cancels the callee's handler with the call (its reply has come back by
        # now); over HTTP the callee is another process, which the caller cannot cancel.
        cancelled = httpx.post(f"{stack.url('callee')}/cancelled_hangs", json={}, trust_env=False).json()
        if colocate:
            assert cancelled == {"cancelled_hangs": 1}
        together = [p.pid for p in psutil.Process(stack.popen.pid).children()]
        stack.popen.send_signal(signal.SIGTERM)
        assert stack.popen.wait(timeout=30) == 0
        assert _wait_gone(together) == []
    log_files = sorted(logs.glob("*.log"))
    lines = [orjson.loads(line) for path in log_files for line in path.read_bytes().splitlines()]
    # The caller logs as it calls; the callee's json_answer logs the bug it met (in process: inside the caller's call)
    logged_by = {message: sorted({line["server"] for line in lines if line["msg"] == message})
                 for message in ("calling /bug", "handler /bug failed")}
    return {"pids": pids, "calls": out, "logged_by": logged_by, "log_files": [path.name for path in log_files]}


def test_servers_in_one_process_answer_and_fail_as_over_http(tmp_path: Path) -> None:
    apart, together = _outcomes(tmp_path, colocate=False), _outcomes(tmp_path, colocate=True)
    assert apart["pids"]["caller"] != apart["pids"]["callee"]
    assert together["pids"]["caller"] == together["pids"]["callee"]
    assert apart["log_files"] == ["callee.log", "caller.log"] and together["log_files"] == ["colocated.log"]
    for outcome in (apart, together):
        assert outcome["logged_by"] == {"calling /bug": ["caller"], "handler /bug failed": ["callee"]}
    for outcome in (apart, together):
        echo = outcome["calls"]["echo"]
        assert echo["reply"]["got"] == CALLS["echo"]["send"] and echo["reply"]["header"] == "p1"
        assert echo["sent_after"] == CALLS["echo"]["send"]  # the callee's change stayed the callee's
        assert echo["reply"]["pid"] == outcome["pids"]["callee"]
    for name in CALLS:
        if name != "echo":
            assert together["calls"][name]["reply"] == apart["calls"][name]["reply"], name
    failures = {name: together["calls"][name]["reply"] for name in CALLS if name != "echo"}
    assert failures["refused"]["status"] == 409
    assert failures["refused"]["body"]["error"] == {"failure_class": "http_4xx", "message": "refused on purpose",
                                                    "detail": "kept"}
    assert failures["downstream"]["status"] == 502
    assert failures["downstream"]["body"]["error"]["failure_class"] == "connect"
    assert failures["bug"]["status"] == failures["not_json"]["status"] == 500
    assert failures["hangs"] == {"failure_class": "timeout", "status": None, "body": None}


def test_a_server_that_fails_to_start_stops_its_group_and_is_named(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(f"""\
echo_a:
  resources_servers:
    echo:
      entrypoint: {ECHO_APP}
echo_b:
  resources_servers:
    echo:
      entrypoint: {ECHO_APP}
      crash_on_start: true
""")
    result = _ng_run(["+config_paths=[c.yaml]", "+colocate_servers=true", f"+head_server.port={free_port()}"],
                     tmp_path)
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert "servers 'echo_a', 'echo_b' (one process) exited with code 1" in first and "colocated.log" in first
    assert "crash_on_start is set" in result.stderr and "server echo_b stopped on its own" in result.stderr
    assert [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])] == []


class _Plain(BaseServer):
    pass


class _OwnServe(BaseServer):
    def serve(self, host: str, port: int, sock: Any = None) -> None:
        raise AssertionError("never served here")


@pytest.mark.parametrize("case, expected", [
    ({}, ["a", "b", "c"]),
    ({"colocate": False}, []),
    ({"tracing": True}, []),
    ({"own_process": "b"}, ["a", "c"]),
    ({"workers": "b"}, ["a", "c"]),
    ({"own_serve": "b"}, ["a", "c"]),
    ({"own_process": "b", "workers": "c"}, []),  # one left: nothing to share a process with
])
def test_which_servers_share_a_process(case: dict[str, Any], expected: list[str]) -> None:
    classes = {name: _OwnServe if case.get("own_serve") == name else _Plain for name in "abc"}
    settings = {name: ServerSettings(own_process=case.get("own_process") == name,
                                     workers=2 if case.get("workers") == name else None) for name in "abc"}
    assert colocated_names(classes, settings, case.get("colocate", True), case.get("tracing", False)) == expected

"""A vllm_model server with two worker processes keeps one request budget for both: requests sent through each
worker (each connection's worker is known from its /health pid) together stay within max_requests_per_minute, which
is also the stub endpoint's own limit, so it never answers 429; with a budget per worker they would go out twice as
fast and meet 429s."""

import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import httpx
import orjson

from nemo_gym.server.launch import SPEC_ENV
from tests.helpers.processes import stop_process_group
from tests.helpers.stack import REPO_ROOT, free_port
from tests.hosted.conftest import RPM, model_server, stub_settings

PER_WORKER = 15


@contextmanager
def _server(name: str, kind: str, implementation: str, settings: dict[str, Any]) -> Iterator[str]:
    spec = {"name": name, "kind": kind, "implementation": implementation, "settings": settings}
    popen = subprocess.Popen([sys.executable, "-m", "nemo_gym.server.launch"], start_new_session=True,
                             env={**os.environ, SPEC_ENV: orjson.dumps(spec).decode(), "PYTHONPATH": str(REPO_ROOT)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{settings['port']}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/health", timeout=2, trust_env=False)
                break
            except httpx.TransportError:
                assert popen.poll() is None and time.monotonic() < deadline, f"{name} did not start"
                time.sleep(0.1)
        yield url
    finally:
        stop_process_group(popen, grace_s=15)


def _clients_by_worker(url: str, per_worker: int) -> dict[int, list[httpx.Client]]:
    """Keep-alive connections until each of the two workers holds `per_worker` of them (known by /health's pid)."""
    by_pid: dict[int, list[httpx.Client]] = {}
    deadline = time.monotonic() + 60
    while len(by_pid) < 2 or min(len(clients) for clients in by_pid.values()) < per_worker:
        assert time.monotonic() < deadline, {pid: len(c) for pid, c in by_pid.items()}
        client = httpx.Client(trust_env=False, timeout=60)
        pid = client.get(f"{url}/health").json()["pid"]
        if len(by_pid.setdefault(pid, [])) < per_worker:
            by_pid[pid].append(client)
        else:
            client.close()
    return by_pid


def test_two_workers_keep_one_request_budget() -> None:
    stub_port, model_port = free_port(), free_port()
    stub = stub_settings(stub_port, latency_median_s=0.01, latency_sigma=0.0)
    settings = model_server(f"http://127.0.0.1:{stub_port}/v1", max_requests_per_minute=RPM, workers=2, port=model_port)
    with _server("stub", "responses_api_models", "hosted_api_stub", stub) as stub_url, \
            _server("model", **_model_spec(settings)) as model_url:
        by_pid = _clients_by_worker(model_url, PER_WORKER)
        answered: dict[int, int] = {pid: 0 for pid in by_pid}
        body = {"messages": [{"role": "user", "content": "What's the weather in Paris?"}], "max_tokens": 5}

        def send(pid: int, client: httpx.Client) -> None:
            if client.post(f"{model_url}/v1/chat/completions", json=body).status_code == 200:
                answered[pid] += 1  # one thread per client, and += on an int under the GIL

        threads = [threading.Thread(target=send, args=(pid, client)) for pid, clients in by_pid.items()
                   for client in clients]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        seen = httpx.get(f"{stub_url}/stats", trust_env=False).json()
        for clients in by_pid.values():
            for client in clients:
                client.close()
    total = 2 * PER_WORKER
    assert list(answered.values()) == [PER_WORKER, PER_WORKER]  # both workers sent their share
    assert seen["rate_limited"] == 0 and seen["completed"] == total, seen
    # One budget: 30 requests at 10 a second, after the half-second burst: at least 2.4 s (two budgets: half that).
    assert elapsed >= (total - 1 - RPM / 60 * 0.5) / (RPM / 60) - 0.05, elapsed


def _model_spec(tree: dict[str, Any]) -> dict[str, Any]:
    (kind, body), = tree.items()
    (implementation, settings), = body.items()
    return {"kind": kind, "implementation": implementation, "settings": settings}

"""A stateless server (an agent) served by several processes on one port: every worker answers, SIGTERM stops them
all, a worker that dies takes the server down, and a server that keeps state refuses more than one."""

import os
import signal
import subprocess
import sys
import time

import httpx
import orjson
import pytest

from nemo_gym.config.servers import ServerSpec
from nemo_gym.errors import ConfigError
from nemo_gym.resources_servers.number_guess.app import NumberGuessResourcesServer
from nemo_gym.responses_api_agents.simple_agent.app import SimpleAgent
from nemo_gym.responses_api_models.local_vllm_model.app import LocalVLLMModelServer
from nemo_gym.responses_api_models.vllm_model.app import VLLMModelServer
from nemo_gym.server.base import default_workers, server_settings
from nemo_gym.server.launch import SPEC_ENV
from nemo_gym.server.supervisor import free_port
from tests.helpers.processes import stop_process_group

REFS = {"resources_server": {"type": "resources_servers", "name": "env"},
        "model_server": {"type": "responses_api_models", "name": "policy"}}
START_S = 60.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited: only its parent's wait() is missing
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _answering_pids(url: str, want: int) -> set[int]:
    """Worker pids seen on fresh connections, until `want` distinct ones answered (each new connection is a new
    source port, which the kernel hashes to a worker)."""
    seen: set[int] = set()
    deadline = time.monotonic() + START_S
    while len(seen) < want and time.monotonic() < deadline:
        try:
            with httpx.Client(trust_env=False) as client:  # a new connection each time
                seen.add(client.get(f"{url}/health", timeout=5).json()["pid"])
        except httpx.TransportError:
            time.sleep(0.1)  # no worker listening yet
    return seen


@pytest.fixture
def two_worker_agent(tmp_path):
    port = free_port()
    spec = {"name": "agent", "kind": "responses_api_agents", "implementation": "simple_agent",
            "settings": {**REFS, "port": port, "workers": 2}}
    with open(tmp_path / "agent.log", "wb") as log:
        popen = subprocess.Popen([sys.executable, "-m", "nemo_gym.server.launch"], start_new_session=True,
                                 env={**os.environ, SPEC_ENV: orjson.dumps(spec).decode()},
                                 stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield popen, f"http://127.0.0.1:{port}"
    finally:
        stop_process_group(popen, grace_s=15)


def test_every_worker_answers_on_the_one_port_and_sigterm_stops_them_all(two_worker_agent) -> None:
    popen, url = two_worker_agent
    workers = _answering_pids(url, want=2)
    assert len(workers) == 2 and popen.pid not in workers
    popen.send_signal(signal.SIGTERM)
    assert popen.wait(timeout=30) == 0
    assert not any(_alive(pid) for pid in workers)


def test_a_worker_that_dies_takes_the_server_down(two_worker_agent) -> None:
    popen, url = two_worker_agent
    first, second = sorted(_answering_pids(url, want=2))
    os.kill(first, signal.SIGKILL)
    assert popen.wait(timeout=30) != 0
    assert not _alive(second)


def test_a_server_that_keeps_state_refuses_more_than_one_worker() -> None:
    spec = ServerSpec("game", "resources_servers", "number_guess", {"workers": 2})
    with pytest.raises(ConfigError, match=r"game.resources_servers.number_guess.workers is 2, but "
                                          r"NumberGuessResourcesServer keeps state between requests"):
        server_settings(NumberGuessResourcesServer, spec)
    assert server_settings(NumberGuessResourcesServer, ServerSpec("game", "resources_servers", "number_guess",
                                                                  {"workers": 1})).workers == 1


def test_a_stateless_server_defaults_to_half_the_cores_and_others_to_one() -> None:
    assert [default_workers(cores) for cores in (1, 2, 3, 8, 64)] == [1, 1, 1, 4, 8]
    agent = SimpleAgent(ServerSpec("agent", "responses_api_agents", "simple_agent", dict(REFS)))
    assert agent.worker_count == default_workers(len(os.sched_getaffinity(0)))
    game = NumberGuessResourcesServer(ServerSpec("game", "resources_servers", "number_guess", {}))
    assert game.worker_count == 1
    assert VLLMModelServer.stateless and not LocalVLLMModelServer.stateless

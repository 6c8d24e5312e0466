"""The processes that hold many sockets take the open-file limit they may when they start (a server when it serves,
a rollout collection when it starts: at 1,024 rollouts in flight they hold more sockets than the usual soft limit of
1,024); merely building an HTTP client or a collector changes nothing in the process that builds it."""

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from nemo_gym.server.supervisor import free_port
from tests.helpers.stack import REPO_ROOT

LOW = 256
SOFT = "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"

CLIENT = f"""
import resource
from nemo_gym.http_client import HttpClient
from nemo_gym.experience.generation import VllmHttpGeneration
HttpClient()
VllmHttpGeneration({{"model_name": "m", "max_new_tokens": 8, "max_seq_len": 64, "pad_token_id": 0}},
                   "http://127.0.0.1:9/v1")
{SOFT}
"""

COLLECTION = f"""
import asyncio, resource, sys
from nemo_gym.errors import DownstreamError
from nemo_gym.rollout_collection.collect import collect_rollouts
from nemo_gym.rollout_collection.config import RolloutCollectionConfig
config = RolloutCollectionConfig.from_mapping({{"input_jsonl_fpath": sys.argv[1], "output_jsonl_fpath": sys.argv[2],
                                               "head_server_url": "http://127.0.0.1:9"}})
{SOFT}
try:
    asyncio.run(collect_rollouts(config))
except DownstreamError:  # no head server there: the run had started, and stopped at its first call
    pass
{SOFT}
"""

TRAJECTORY_COLLECTOR = f"""
import resource
from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from tests.experience.collector_fakes import ScriptedRolloutManager, make_dataset, master_config
collector = AsyncTrajectoryCollector(None, None, {{}}, master_config(), ReplayBuffer(24),
                                     rollout_manager=ScriptedRolloutManager())
{SOFT}
collector.start_collection(StatefulPromptLoader(make_dataset(8), 4))
collector.shutdown()
{SOFT}
"""

SERVER = """
import sys
from nemo_gym.config.servers import ServerSpec
from nemo_gym.server.base import BaseServer
BaseServer(ServerSpec("tiny", "resources_servers", "tiny")).serve("127.0.0.1", int(sys.argv[1]))
"""


def _hard_limit() -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= LOW:
        pytest.fail(f"this machine's hard open-files limit ({hard}) leaves nothing to raise: the test needs > {LOW}")
    return hard


def _low_soft_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOW, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def _soft_limits(script: str, *args: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120,
                         preexec_fn=_low_soft_limit, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert out.returncode == 0, out.stderr
    return [int(line) for line in out.stdout.split()]


def test_building_clients_leaves_the_limit_alone() -> None:
    _hard_limit()
    assert _soft_limits(CLIENT) == [LOW]


def test_a_rollout_collection_raises_it_when_it_starts(tmp_path: Path) -> None:
    hard = _hard_limit()
    rows = f"{tmp_path}/in.jsonl"
    with open(rows, "w") as out:
        out.write('{"responses_create_params": {"input": "hi"}, "agent_ref": {"name": "a"}}\n')
    assert _soft_limits(COLLECTION, rows, f"{tmp_path}/out.jsonl") == [LOW, hard]
    assert _soft_limits(TRAJECTORY_COLLECTOR) == [LOW, hard]


def test_a_server_raises_it_when_it_serves() -> None:
    hard = _hard_limit()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], preexec_fn=_low_soft_limit, cwd=REPO_ROOT,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120  # a guard against a hang: it answers within a second or two
        while True:  # until it answers (or exits)
            assert server.poll() is None, server.communicate()[1]
            assert time.monotonic() < deadline, "the server did not answer /health"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        limits = open(f"/proc/{server.pid}/limits").read()
        soft = next(line.split()[3] for line in limits.splitlines() if line.startswith("Max open files"))
        assert int(soft) == hard
    finally:
        server.terminate()
        server.wait(timeout=30)

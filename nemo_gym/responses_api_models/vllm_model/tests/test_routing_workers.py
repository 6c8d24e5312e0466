"""vllm_model with two worker processes in front of four simulated replicas (benchmarks/fleet): the kernel spreads
connections over the workers, so a session's turns reach both, and every turn still goes to the session's replica
(the routing table is shared); new sessions spread over the replicas."""

from collections import Counter
from pathlib import Path

import httpx
import yaml

from benchmarks.fleet.__main__ import DEFAULT_MODEL
from benchmarks.fleet.stack import fleet_process
from benchmarks.fleet.workload import MULTI_TURN
from nemo_gym import protocol
from nemo_gym.model_calls import REPLY_FIELD
from tests.helpers.stack import running_stack

SESSIONS = 24
TURNS = 4


def _post(url: str, session: str) -> str:
    """One turn of `session` on a connection of its own (so the kernel may give it to either worker); the replica
    that answered it."""
    body = {"input": [{"role": "user", "content": f"What's the weather in Paris? Session {session}."}],
            "max_output_tokens": 8}
    with httpx.Client(trust_env=False, timeout=60) as client:
        reply = client.post(f"{url}/v1/responses", json=body, headers={protocol.SESSION_HEADER: session})
    reply.raise_for_status()
    return str(reply.json()[REPLY_FIELD]["endpoint"])


def test_a_session_keeps_its_replica_whichever_worker_takes_its_turn(tmp_path: Path) -> None:
    with fleet_process(tmp_path / "fleet", replicas=4, time_scale=100.0, workload=MULTI_TURN) as fleet:
        config = {"policy_model": {"responses_api_models": {"vllm_model": {
            "base_url": fleet.base_urls, "model": DEFAULT_MODEL, "workers": 2}}}}
        (tmp_path / "model.yaml").write_text(yaml.safe_dump(config))
        with running_stack([f"+config_paths=[{tmp_path / 'model.yaml'}]"], cwd=tmp_path) as stack:
            url = stack.url("policy_model")
            pids = {httpx.get(f"{url}/health", trust_env=False).json()["pid"] for _ in range(40)}
            served = {f"s{i}": [_post(url, f"s{i}") for _ in range(TURNS)] for i in range(SESSIONS)}
    assert len(pids) == 2  # both workers take connections
    assert all(len(set(replicas)) == 1 for replicas in served.values())  # every turn on the session's replica
    spread = Counter(replicas[0] for replicas in served.values())
    assert set(spread) == {url.rstrip("/") for url in fleet.base_urls}  # new sessions over all the replicas

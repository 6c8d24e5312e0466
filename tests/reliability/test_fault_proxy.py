"""Faults on every hop of a rollout, through the real agent and environment, and the failure class each one produced.

    collector -> [agent_hop] -> simple_agent -> [weather_hop] -> weather env
                                             -> [model_hop] -> vllm_model -> [in-process proxy] -> instant_chat

A seeded plan gives 40 of the 120 rollouts one fault each: every fault kind on every hop, twice. A rollout either
succeeds with reward 1 or is recorded as failed with the class the table below predicts; nothing else.
"""

import random
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from tests.collection.util import keys, read_rows, run_cli, sidecar
from tests.helpers.stack import Stack, free_port, running_stack
from tests.reliability.apps.fault_proxy import FAULTS, FaultProxy
from tests.reliability.conftest import AGENT, stack_args, write_weather_rows

ROWS = 120
FAULT_HOP = Path(__file__).parent / "apps" / "fault_hop.py"
HOPS = ("agent_hop", "weather_hop", "model_hop", "chat")  # chat: vllm_model -> the stub, the in-process proxy
# What one fault on the first request of a rollout through a hop leads to: None is a rollout that still succeeds.
# The collector makes one attempt and no server retries on its own (docs/architecture.md, "Retry budget"), so every
# hop ends the same way; vllm_model's 2 s read timeout makes a hang behind it a `timeout` too.
FAULT_CLASS: dict[str, str | None] = {"latency": None, "http_503": "http_5xx", "reset": "connect", "hang": "timeout",
                                      "truncate": "invalid_response"}
EXPECTED: dict[str, dict[str, str | None]] = {hop: FAULT_CLASS for hop in HOPS}


def _hops_config(workdir: Path) -> Path:
    """Hop servers in front of the agent, the environment and the model server, and the agent pointed at them."""
    def hop(kind: str, upstream: str) -> dict:
        return {kind: {"fault_hop": {"entrypoint": str(FAULT_HOP), "upstream": upstream}}}
    tree = {
        "agent_hop": hop("responses_api_agents", AGENT),
        "weather_hop": hop("resources_servers", "example_single_tool_call"),
        "model_hop": hop("responses_api_models", "policy_model"),
        AGENT: {"responses_api_agents": {"simple_agent": {
            "resources_server": {"type": "resources_servers", "name": "weather_hop"},
            "model_server": {"type": "responses_api_models", "name": "model_hop"}}}},
    }
    (workdir / "hops.yaml").write_text(yaml.safe_dump(tree))
    return workdir / "hops.yaml"


@pytest.fixture
def hopped_stack(tmp_path: Path) -> Iterator[tuple[Stack, FaultProxy]]:
    chat_port = free_port()
    proxy = FaultProxy(f"http://127.0.0.1:{chat_port}", rate=0.0, seed=20240611, hang_s=600)
    proxy_port = proxy.start()
    args = stack_args(tmp_path, chat_port, f"http://127.0.0.1:{proxy_port}/v1")
    args[0] = args[0].replace("]", f",{_hops_config(tmp_path)}]")
    try:
        with running_stack(args, cwd=tmp_path) as stack:
            yield stack, proxy
    finally:
        proxy.stop()


def _set_plans(stack: Stack, proxy: FaultProxy, plan: dict[int, tuple[str, str]]) -> None:
    for hop in HOPS:
        hop_plan = {task: fault for task, (where, fault) in plan.items() if where == hop}
        if hop == "chat":
            proxy.plan, proxy.injected_keys = hop_plan, {}
        else:
            httpx.post(f"{stack.url(hop)}/_faults", json={"plan": hop_plan}, trust_env=False,
                       timeout=60).raise_for_status()


def _injected(stack: Stack, proxy: FaultProxy) -> dict[int, tuple[str, str]]:
    done = {task: ("chat", fault) for task, fault in proxy.injected_keys.items()}
    for hop in HOPS[:-1]:
        record = httpx.get(f"{stack.url(hop)}/_faults", trust_env=False, timeout=60).json()["injected"]
        done.update({int(task): (hop, fault) for task, fault in record.items()})
    return done


@pytest.mark.timeout(600)
def test_faults_on_every_hop_give_the_predicted_failure_class_and_resume_finishes_exactly_once(
        hopped_stack: tuple[Stack, FaultProxy], tmp_path: Path) -> None:
    stack, proxy = hopped_stack
    write_weather_rows(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "r.jsonl"
    failures_path = sidecar(out, "_failures.jsonl")
    rng = random.Random(20240611)
    combos = [(hop, fault) for hop in HOPS for fault in FAULTS] * 2
    plan = dict(zip(rng.sample(range(ROWS), len(combos)), combos))
    _set_plans(stack, proxy, plan)
    # One attempt per rollout, so each fault the stack does not absorb is a recorded failure. The deadline is far
    # above a clean rollout's time on a busy machine and above vllm_model's 2 s read timeout, and far below how long
    # a hang holds (600 s), so a hang ends as `timeout`.
    args = [f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}", "+agent_name=agent_hop",
            f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={out}",
            "+num_samples_in_parallel=16", "+max_attempts=1", "+rollout_timeout_s=30"]
    started = time.monotonic()
    first = run_cli("collect", args, tmp_path, timeout=300)
    elapsed = time.monotonic() - started
    injected = _injected(stack, proxy)
    _set_plans(stack, proxy, {})
    print(f"faulted run: {elapsed:.1f} s; injected {len(injected)}: {dict(Counter(injected.values()))}")
    assert injected == plan, (f"planned but not injected: {set(plan.items()) - set(injected.items())}; "
                              f"in-process proxy: {proxy.requests} requests, plan {proxy.plan}")

    succeeded = keys(out)
    failures = read_rows(failures_path)
    got = {f["_ng_task_index"]: f["failure_class"] for f in failures}
    expected = {task: cls for task, (hop, fault) in plan.items() if (cls := EXPECTED[hop][fault]) is not None}
    by_combo = {f"{hop}/{fault}": sorted({got.get(t, "ok") for t, c in plan.items() if c == (hop, fault)})
                for hop, fault in combos}
    print(f"outcome by hop/fault: {by_combo}")
    assert got == expected, f"by hop/fault: {by_combo}"
    assert sorted(succeeded) == sorted({(t, 0) for t in range(ROWS)} - {(t, 0) for t in expected})
    assert all(row["reward"] == 1.0 for row in read_rows(out))
    for failure in failures:
        assert failure["attempts"] == 1 and failure["last_error"], failure
        assert "reward" not in failure and "response" not in failure
    assert first.returncode == 1 and f"FAILED: {len(expected)} rollouts" in first.stdout, first.stdout[-2000:]

    resumed = run_cli("collect", [*args, "+resume_from_cache=true"], tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{len(expected)} failed ones will be retried" in resumed.stdout
    final = keys(out)
    assert sorted(final) == [(t, 0) for t in range(ROWS)]
    assert all(row["reward"] == 1.0 for row in read_rows(out)) and not failures_path.exists()

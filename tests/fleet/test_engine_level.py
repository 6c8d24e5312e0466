"""The automatic level from vLLM's own signals (rollout_collection/engine_level.py) and the reading of those signals
from vLLM's /metrics (responses_api_models/vllm_model/engine_load.py)."""

from dataclasses import replace

import pytest

from nemo_gym.responses_api_models.vllm_model.engine_load import EngineLoad, parse_metrics
from nemo_gym.rollout_collection.concurrency import DECREASE, Outcome
from nemo_gym.rollout_collection.engine_level import (
    BACKOFF,
    KV_TARGET,
    EngineLevel,
    FleetLoad,
    start_level,
)

# vLLM 0.32's /metrics, cut to the lines read (and a few beside them), for a vLLM with two engines.
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 17.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
vllm:num_preemptions_total{engine="0",model_name="m"} 4.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.796585695129174e+09
vllm:cache_config_info{block_size="128",engine="0",kv_cache_max_concurrency="22.75",num_gpu_blocks="364"} 1.0
vllm:cache_config_info{block_size="128",engine="1",kv_cache_max_concurrency="22.75",num_gpu_blocks="364"} 1.0
"""


def _replica(running: int = 10, waiting: int = 0, kv: float = 0.3, preemptions: int = 0,
             capacity: float | None = 22.75) -> dict:
    return {"endpoint": "http://127.0.0.1:1/v1", "running": running, "waiting": waiting, "kv_cache_usage": kv,
            "preemptions": preemptions, "capacity": capacity}


def _load(**fields: float) -> FleetLoad:
    load = FleetLoad.of({"policy_model": [_replica(**fields)]})  # type: ignore[arg-type]
    assert load is not None
    return load


def test_vllms_metrics_give_each_engines_load_summed() -> None:
    assert parse_metrics(METRICS) == EngineLoad(running=20, waiting=2, kv_cache_usage=0.375, preemptions=4,
                                                capacity=45.5)
    with pytest.raises(ValueError):
        parse_metrics("# an endpoint that is not vLLM\nhttp_requests_total 3\n")
    unsized = parse_metrics(METRICS.replace('kv_cache_max_concurrency="22.75"', 'kv_cache_max_concurrency="None"'))
    assert unsized.capacity is None


def test_the_fleet_is_every_servers_replicas_and_none_where_one_is_unread() -> None:
    load = FleetLoad.of({"policy": [_replica(running=4, waiting=1, kv=0.2), _replica(running=6, kv=0.4)],
                         "judge": [_replica(preemptions=3, capacity=10.0)]})
    assert load is not None and load.kv_cache_usage == pytest.approx(0.3)
    assert replace(load, kv_cache_usage=0.3) == FleetLoad(replicas=3, running=20, waiting=1, kv_cache_usage=0.3,
                                                          preemptions=3, capacity=55.5)
    assert FleetLoad.of({"policy": [_replica(), {"endpoint": "x", "error": "connect: refused"}]}) is None
    assert FleetLoad.of({"policy": [_replica(capacity=None)]}) is None
    for garbage in ("busy", {"running": "3"}, {**_replica(), "waiting": -1}, {**_replica(), "capacity": True}):
        assert FleetLoad.of({"policy": [garbage]}) is None  # type: ignore[list-item]
    assert FleetLoad.of({}) is None and FleetLoad.of({"policy": []}) is None


def test_a_long_run_starts_at_the_capacity_vllm_reports() -> None:
    assert start_level(_load(capacity=22.75), ceiling=16384) == 22
    assert start_level(_load(capacity=22.75), ceiling=8) == 8
    assert start_level(_load(capacity=0.4), ceiling=8) == 1


def _outcome(rate_limited: int = 0) -> Outcome:
    return Outcome(admitted=1, latency_s=1.0, rate_limited=rate_limited, failed=bool(rate_limited))


def test_the_level_rises_by_the_kv_caches_room_while_nothing_waits_and_every_place_is_taken() -> None:
    policy = EngineLevel(ceiling=100, level=22, load=_load())
    policy.observe(_load(running=22, kv=0.6), level=22, in_flight=22)  # room for half as many again
    assert policy.next_level(22, _outcome(), admitted=30) == 33 and "raised" in policy.reason
    policy.observe(_load(running=22, kv=0.1), level=22, in_flight=22)  # far more room: at most twice as many
    assert policy.next_level(22, _outcome(), admitted=30) == 44
    policy.observe(_load(running=22, kv=0.88), level=22, in_flight=22)  # nearly full: a little more
    assert policy.next_level(22, _outcome(), admitted=30) == 24
    policy.observe(_load(running=2, kv=0.85), level=2, in_flight=2)
    assert policy.next_level(2, _outcome(), admitted=31) == 3  # at least one more
    policy.observe(_load(running=22), level=22, in_flight=15)  # the level holds nothing back: no reason to rise
    assert policy.next_level(22, _outcome(), admitted=32) == 22
    policy.observe(_load(running=99), level=99, in_flight=99)
    assert policy.next_level(99, _outcome(), admitted=33) == 100  # never past the ceiling


@pytest.mark.parametrize(("load", "cause"), [
    ({"running": 20, "preemptions": 1}, "preemptions"),
    ({"running": 20, "kv": KV_TARGET + 0.05}, "KV cache full"),
])
def test_the_level_backs_off_on_a_preemption_or_a_full_kv_cache(load: dict, cause: str) -> None:
    policy = EngineLevel(ceiling=100, level=40, load=_load())
    policy.observe(_load(**load), level=40, in_flight=40)
    assert policy.next_level(40, _outcome(), admitted=50) == int(40 * BACKOFF)
    assert policy.reason.startswith(f"backed off: {cause}")
    policy.observe(_load(**load), level=34, in_flight=34)
    again = policy.next_level(34, _outcome(), admitted=60)
    # The same preemption count again is no new preemption (nothing waits: it rises); a full cache stays full.
    assert again > 34 if cause == "preemptions" else again == int(34 * BACKOFF)


def test_a_queue_beyond_a_short_one_lowers_the_level_by_its_excess_and_a_short_one_slows_the_rise() -> None:
    policy = EngineLevel(ceiling=1000, level=240, load=_load())
    policy.observe(_load(running=200, waiting=30), level=240, in_flight=240)  # a short queue: 10 of 200 running
    assert policy.next_level(240, _outcome(), admitted=300) == 220 and "waiting" in policy.reason
    # The batches full and a few waiting, as a busy fleet always shows between steps: it rises by the KV caches'
    # room as with none waiting (the simulated 32-replica fleet held at 41% of its slots on a hold here).
    policy.observe(_load(running=200, waiting=5, kv=0.6), level=220, in_flight=220)
    assert policy.next_level(220, _outcome(), admitted=310) == 330 and "short queue" in policy.reason
    policy.observe(_load(running=200, waiting=5, kv=0.1), level=220, in_flight=200)  # places free: it holds
    assert policy.next_level(220, _outcome(), admitted=310) == 220
    policy.observe(_load(running=3, waiting=4), level=8, in_flight=8)
    assert policy.next_level(8, _outcome(), admitted=320) == 5  # a queue of one is short enough


def test_a_queue_seen_again_before_the_rollouts_above_the_level_end_cuts_once() -> None:
    """The level is cut below what is in flight, which drains only as rollouts end: the next read, the same queue,
    must not cut again (the simulated fleet's level fell from 2,157 to 1 that way in four reads)."""
    policy = EngineLevel(ceiling=4000, level=2000, load=_load())
    queue = _load(running=1000, waiting=900)  # short queue: 50
    policy.observe(queue, level=2000, in_flight=2000)
    assert policy.next_level(2000, _outcome(), admitted=2100) == 1150
    for _ in range(3):  # nothing has ended yet: 2,000 still in flight, the same queue
        policy.observe(queue, level=1150, in_flight=2000)
        assert policy.next_level(1150, _outcome(), admitted=2100) == 1150
    policy.observe(_load(running=1000, waiting=350), level=1150, in_flight=2000)  # a shorter queue: still no raise
    assert policy.next_level(1150, _outcome(), admitted=2100) == 1150
    full = _load(running=1000, kv=KV_TARGET + 0.05)
    policy.observe(full, level=1150, in_flight=1150)
    assert policy.next_level(1150, _outcome(), admitted=2100) == int(1150 * BACKOFF)
    policy.observe(full, level=int(1150 * BACKOFF), in_flight=1150)  # the same full cache, nothing ended yet
    assert policy.next_level(int(1150 * BACKOFF), _outcome(), admitted=2100) == int(1150 * BACKOFF)


def test_a_rollout_that_met_429s_cuts_the_level() -> None:
    policy = EngineLevel(ceiling=100, level=40, load=_load())
    assert policy.next_level(40, _outcome(rate_limited=2), admitted=50) == int(40 * DECREASE)
    assert "429" in policy.reason

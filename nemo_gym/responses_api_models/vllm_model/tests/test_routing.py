"""The replica router: sticky sessions, least-loaded placement, the overload bound, down replicas and their probes,
hash routing, and one table shared by forked worker processes."""

import asyncio
import multiprocessing
from collections import Counter

import pytest

from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.responses_api_models.vllm_model.routing import (
    OVERLOAD_FACTOR, OVERLOAD_SLACK, SESSION_BUCKETS, ReplicaRouter, probe, session_fingerprint, shared_router,
)


def test_a_session_stays_on_its_replica() -> None:
    router = ReplicaRouter(4)
    first = router.pick("s1")
    router.done(first)
    for _ in range(10):
        index = router.pick("s1")
        assert index == first
        router.done(index)
    snapshot = router.snapshot()
    assert (snapshot.placed, snapshot.kept, snapshot.moved) == (1, 10, 0)
    assert snapshot.in_flight == [0, 0, 0, 0]


def test_new_sessions_go_to_the_least_loaded() -> None:
    router = ReplicaRouter(8)
    held = [router.pick(f"s{i}") for i in range(800)]  # none done: each placement sees the ones before
    assert Counter(held) == {i: 100 for i in range(8)}
    busy = router.pick("busy")  # make one replica the most loaded, then the next session avoids it
    assert router.pick("next") != busy


def test_an_overloaded_replica_loses_its_sessions_to_the_least_loaded() -> None:
    router = ReplicaRouter(4)
    homes = {}
    for i in range(400):
        homes[f"s{i}"] = router.pick(f"s{i}")
        router.done(homes[f"s{i}"])
    home = homes["s0"]
    mine = [session for session, index in homes.items() if index == home]
    # Their next turns, all in flight at once: they stay home until its load crosses the bound, then move.
    picked = [router.pick(session) for session in mine]
    assert picked[:OVERLOAD_SLACK + 1] == [home] * (OVERLOAD_SLACK + 1)
    assert len(set(picked)) == 4  # the rest spread over the others, home taking its bounded share
    snapshot = router.snapshot()
    mean = sum(snapshot.in_flight) / 4
    assert snapshot.in_flight[home] <= OVERLOAD_FACTOR * mean + OVERLOAD_SLACK + 1
    assert snapshot.moved == len([index for index in picked if index != home]) > len(mine) / 2
    moved = next(session for session, index in zip(mine, picked) if index != home)
    new_home = picked[mine.index(moved)]
    router.done(new_home)
    assert router.pick(moved) == new_home  # a moved session stays on its new replica


def test_a_down_replica_gets_nothing_until_a_probe_finds_it_up() -> None:
    router = ReplicaRouter(3, probe_interval_s=0.0)
    home = router.pick("s")
    router.done(home)
    router.failed_to_connect(home)
    assert router.snapshot().down[home] and router.snapshot().downs[home] == 1
    sessions = [router.pick(f"n{i}") for i in range(30)]
    assert home not in sessions
    assert router.pick("s") != home  # its session moved
    assert router.due_probes() == [home]
    router.up_again(home)
    assert not router.snapshot().down[home]
    assert router.pick("fresh") == home  # the least loaded now: it takes new sessions at once


def test_a_probe_is_claimed_once_per_interval() -> None:
    now = [0.0]
    router = ReplicaRouter(2, probe_interval_s=3600.0, clock=lambda: now[0])
    router.failed_to_connect(1)
    assert router.due_probes() == []  # the first probe comes an interval after the failure
    now[0] = 3600.0  # its probe time has come
    assert router.due_probes() == [1]
    assert router.due_probes() == []  # claimed: the next one an interval later


def test_with_every_replica_down_requests_still_go_somewhere() -> None:
    router = ReplicaRouter(2)
    router.failed_to_connect(0)
    router.failed_to_connect(1)
    assert router.pick("s") in (0, 1)


def test_hash_routing_ignores_load_but_not_a_dead_replica() -> None:
    router = ReplicaRouter(4, mode="hash")
    home = router.pick("s")
    for _ in range(50):
        assert router.pick("s") == home  # never done: the load on `home` grows, the session stays
    router.failed_to_connect(home)
    other = router.pick("s")
    assert other != home
    spread = Counter(router.pick(f"x{i}") for i in range(4000))
    assert set(spread) == {0, 1, 2, 3} - {home}
    assert min(spread.values()) > 4000 / 3 * 0.85


def test_sessions_beyond_a_bucket_forget_the_oldest() -> None:
    router = ReplicaRouter(4)
    same_bucket: list[str] = []
    i = 0
    while len(same_bucket) < 5:  # sessions whose fingerprints share a bucket of the table
        name = f"b{i}"
        if session_fingerprint(name) % SESSION_BUCKETS == 7:
            same_bucket.append(name)
        i += 1
    for name in same_bucket:
        router.done(router.pick(name))
    assert router._placed(session_fingerprint(same_bucket[0])) is None
    assert all(router._placed(session_fingerprint(name)) is not None for name in same_bucket[1:])


def _worker(router: ReplicaRouter, session: str, out: "multiprocessing.Queue[int]") -> None:
    out.put(router.pick(session))  # left in flight: the parent must see it


def test_worker_processes_share_one_table() -> None:
    context = multiprocessing.get_context("fork")
    router = shared_router("test_shared_table", 4, "load_aware")
    assert shared_router("test_shared_table", 4, "load_aware") is router  # each worker's server object finds it
    out: "multiprocessing.Queue[int]" = context.Queue()
    child = context.Process(target=_worker, args=(router, "forked-session", out))
    child.start()
    index = out.get(timeout=30)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert router.snapshot().in_flight[index] == 1  # the child's request, counted where the parent sees it
    assert router.pick("forked-session") == index  # the session the child placed stays there for the parent


@pytest.mark.parametrize("replicas", [0, 1 << 16])
def test_replica_counts_out_of_range_are_refused(replicas: int) -> None:
    with pytest.raises(ValueError):
        ReplicaRouter(replicas)


def test_routed_counts_the_request_and_a_connection_failure_takes_its_replica_down() -> None:
    router = ReplicaRouter(2)
    with router.routed("s") as index:
        assert router.snapshot().in_flight[index] == 1
    assert router.snapshot().in_flight == [0, 0]
    with pytest.raises(RequestFailed):
        with router.routed("s") as index:
            raise RequestFailed(FailureClass.TIMEOUT, "slow, not dead")
    assert router.snapshot().down == [False, False]
    with pytest.raises(RequestFailed):
        with router.routed("s") as index:
            raise RequestFailed(FailureClass.CONNECT, "connection refused")
    assert router.snapshot().down[index] and router.snapshot().in_flight == [0, 0]


def test_a_probe_that_answers_brings_the_replica_back() -> None:
    router = ReplicaRouter(2)
    router.failed_to_connect(1)

    async def refused() -> None:
        raise RequestFailed(FailureClass.CONNECT, "connection refused")

    async def answers() -> dict[str, list[object]]:
        return {"data": []}

    assert asyncio.run(probe(router, 1, refused)) is False
    assert router.snapshot().down[1]
    assert asyncio.run(probe(router, 1, answers)) is True
    assert not router.snapshot().down[1]

"""Outlier ejection in the replica router (routing.py) and the hang watch (hang_watch.py), on a fake clock: which
failures eject, for how long, the probe that readmits, the share that may be out, and a hung replica told from a
slow or paused fleet."""

import asyncio
from typing import Any, Callable, Coroutine

import pytest

from nemo_gym.config.model_servers import OutlierRules
from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.responses_api_models.vllm_model.hang_watch import HANG_MIN_SAMPLES, AnsweredElsewhere, HangWatch
from nemo_gym.responses_api_models.vllm_model.routing import (RATE_MIN_REQUESTS, SLOW_MARGIN_S, SLOW_MIN_ANSWERS,
                                                               ReplicaRouter)

RULES = OutlierRules()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _router(replicas: int, **rules: float) -> tuple[ReplicaRouter, Clock]:
    clock = Clock()
    return ReplicaRouter(replicas, rules=OutlierRules(**rules), clock=clock), clock  # type: ignore[arg-type]


def _fail(router: ReplicaRouter, index: int, failure_class: FailureClass = FailureClass.HTTP_5XX) -> None:
    router.failed(index, failure_class)


def _picks(router: ReplicaRouter, count: int, name: str = "new") -> set[int]:
    """The replicas `count` new sessions went to."""
    chosen = set()
    for n in range(count):
        index = router.pick(f"{name}-{n}")
        chosen.add(index)
        router.answered(index)
        router.done(index)
    return chosen


def test_consecutive_failures_eject_a_replica_and_a_real_request_probes_it_back() -> None:
    router, clock = _router(2)
    for _ in range(RULES.consecutive_failures - 1):
        _fail(router, 1)
    assert router.snapshot().replicas[1].state == "in_service"
    _fail(router, 1)
    stats = router.snapshot().replicas[1]
    assert (stats.state, stats.ejections, stats.failures) == ("ejected", 1, {"http_5xx": RULES.consecutive_failures})
    assert _picks(router, 20) == {0}  # new sessions and sticky ones alike avoid it
    clock.now += RULES.ejection_base_s
    probe = router.pick(None, avoid=(0,))
    assert probe == 1 and router.snapshot().replicas[1].state == "probing"
    assert _picks(router, 5, "during") == {0}  # one probe at a time
    router.answered(probe)
    router.done(probe)
    assert router.snapshot().replicas[1].state == "in_service"
    assert 1 in _picks(router, 8, "after")


def test_a_failed_probe_ejects_again_for_twice_as_long() -> None:
    router, clock = _router(2)
    for _ in range(RULES.consecutive_failures):
        _fail(router, 1)
    clock.now += RULES.ejection_base_s
    assert router.pick(None, avoid=(0,)) == 1
    _fail(router, 1)
    router.done(1)
    stats = router.snapshot().replicas[1]
    assert stats.state == "ejected" and stats.ejections == 2
    assert stats.ejected_for_s == pytest.approx(2 * RULES.ejection_base_s)


def test_a_failure_rate_far_above_the_peers_ejects() -> None:
    router, _ = _router(3)
    for n in range(RATE_MIN_REQUESTS * 10):
        if n % 3 == 2:  # two of three fail, never three in a row
            router.answered(2)
        else:
            _fail(router, 2)
        router.answered(0)
        router.answered(1)
        if router.snapshot().replicas[2].state == "ejected":
            break
    assert router.snapshot().replicas[2].state == "ejected"
    assert [r.ejections for r in router.snapshot().replicas] == [0, 0, 1]


def test_failures_of_the_request_or_the_rate_limit_never_eject() -> None:
    router, _ = _router(2)
    for _ in range(10):
        _fail(router, 1, FailureClass.HTTP_4XX)
        _fail(router, 1, FailureClass.RATE_LIMITED)
    stats = router.snapshot().replicas[1]
    assert stats.state == "in_service" and stats.failures == {"http_4xx": 10, "rate_limited": 10}


def test_at_most_the_configured_share_is_out_so_a_fleet_wide_failure_stays_visible() -> None:
    router, _ = _router(4)
    for _ in range(RULES.consecutive_failures):
        for index in range(4):
            _fail(router, index)
    states = [r.state for r in router.snapshot().replicas]
    assert states.count("ejected") == 2 and states.count("in_service") == 2
    router.failed_to_connect(0)  # down counts towards the share too, and replaces an ejection
    assert router.snapshot().replicas[0].state == "down"
    none, _ = _router(1)
    for _ in range(10):
        _fail(none, 0)
    assert none.snapshot().replicas[0].state == "in_service"  # one replica: never ejected


def test_a_replica_going_down_while_the_share_is_out_readmits_the_ejected_one() -> None:
    router, clock = _router(4)
    for _ in range(RULES.consecutive_failures):
        _fail(router, 1)
    clock.now += 1.0
    for _ in range(RULES.consecutive_failures):
        _fail(router, 2)
    router.failed_to_connect(3)  # three out of four: the ejected replica due back soonest comes back
    assert [r.state for r in router.snapshot().replicas] == ["in_service", "in_service", "ejected", "down"]
    pair, _ = _router(2)
    for _ in range(RULES.consecutive_failures):
        _fail(pair, 0)
    pair.failed_to_connect(1)  # the other one crashed: the ejected one is all there is
    assert [r.state for r in pair.snapshot().replicas] == ["in_service", "down"]
    assert pair.in_service_besides((1,))


def test_every_replica_out_still_routes_requests() -> None:
    router, _ = _router(2, max_ejected_share=1.0)
    for _ in range(RULES.consecutive_failures):
        _fail(router, 0)
        _fail(router, 1)
    assert [r.state for r in router.snapshot().replicas] == ["ejected", "ejected"]
    assert router.pick("s") in (0, 1)


def test_a_failed_request_may_go_to_a_replica_it_has_not_tried() -> None:
    router, _ = _router(3)
    assert router.in_service_besides((0, 1))
    for _ in range(RULES.consecutive_failures):
        _fail(router, 2)
    assert not router.in_service_besides((0, 1))
    assert router.pick("s", avoid=(0,)) == 1


async def _pending_forever() -> None:
    await asyncio.Event().wait()


def test_the_hang_watch_gives_up_a_request_on_a_replica_that_answers_nothing() -> None:
    async def scenario() -> None:
        router, clock = _router(2, hang_floor_s=1.0)
        watch = HangWatch(router)
        for _ in range(HANG_MIN_SAMPLES):
            await watch.watched(0, asyncio.sleep(0))
        assert watch.threshold_s() == 1.0  # p99 near 0: the floor
        lone = asyncio.create_task(watch.watched(1, _pending_forever()))
        await asyncio.sleep(0)
        clock.now += 0.5
        router.answered(0)  # the other replica answers meanwhile
        assert watch.check() == 0  # not old enough yet
        clock.now += 1.0
        assert watch.check() == 0  # one long request alone on its replica: not a hung replica
        second = asyncio.create_task(watch.watched(1, _pending_forever()))
        await asyncio.sleep(0)
        clock.now += 0.5
        router.answered(0)
        clock.now += 1.0
        assert watch.check() == 2
        for hung in (lone, second):
            with pytest.raises(RequestFailed) as failed:
                await hung
            assert failed.value.failure_class == FailureClass.TIMEOUT and "while the others" in failed.value.message
        watch.close()

    asyncio.run(scenario())


async def _watching(watch: HangWatch, index: int, count: int) -> list["asyncio.Task[None]"]:
    """`count` requests to replica `index` that are never answered, registered with the watch."""
    tasks = [asyncio.create_task(watch.watched(index, _pending_forever())) for _ in range(count)]
    await asyncio.sleep(0)
    return tasks


async def _primed(replicas: int) -> tuple[ReplicaRouter, Clock, HangWatch]:
    router, clock = _router(replicas, hang_floor_s=1.0)
    watch = HangWatch(router)
    for _ in range(HANG_MIN_SAMPLES):
        await watch.watched(0, asyncio.sleep(0))
    return router, clock, watch


async def _given_up(watch: HangWatch, stuck: list["asyncio.Task[None]"]) -> None:
    """The watch's next check gives up every one of `stuck`, each as a timeout."""
    assert watch.check() == len(stuck)
    for task in stuck:
        with pytest.raises(RequestFailed) as failed:
            await task
        assert failed.value.failure_class == FailureClass.TIMEOUT
    watch.close()


def test_the_hang_watch_leaves_a_paused_fleet_and_a_slow_replica_alone() -> None:
    async def scenario() -> None:
        router, clock, watch = await _primed(2)
        router.answered(0)
        assert router.pick(None, avoid=(1,)) == 0  # a request waits on replica 0 too
        waiting = await _watching(watch, 1, 3)
        clock.now += 10.0
        assert watch.check() == 0  # nobody answers while both wait: a paused fleet, not a hung replica
        router.answered(0)
        router.answered(1)  # replica 1 answers other requests: slow, not hung
        clock.now += 0.5
        assert watch.check() == 0
        for task in waiting:
            task.cancel()
        watch.close()

    asyncio.run(scenario())


def test_a_replica_that_stops_mid_generation_is_found_by_its_silence() -> None:
    async def scenario() -> None:
        router, clock, watch = await _primed(2)
        stuck = await _watching(watch, 1, 2)
        clock.now += 0.5
        router.answered(1)  # an answer after the stuck requests were sent; then nothing
        clock.now += 1.5
        router.answered(0)
        clock.now += 0.2
        await _given_up(watch, stuck)

    asyncio.run(scenario())


def test_a_request_gets_no_more_than_its_time_whatever_the_replicas() -> None:
    async def scenario() -> None:
        router, _ = _router(1)
        watch = HangWatch(router)
        deadline = asyncio.get_running_loop().time()  # already passed: the attempt ends at once
        with pytest.raises(RequestFailed) as failed:
            await watch.watched(0, _pending_forever(), deadline)
        assert failed.value.failure_class == FailureClass.TIMEOUT and "request's time" in failed.value.message

    asyncio.run(scenario())


def test_a_replica_hung_at_the_end_of_a_run_is_found_while_its_peers_idle() -> None:
    async def scenario() -> None:
        router, clock, watch = await _primed(2)
        stuck = await _watching(watch, 1, 2)
        router.answered(0)  # the other replica finished its last request and has nothing left
        clock.now += 5.0
        await _given_up(watch, stuck)

    asyncio.run(scenario())


def test_a_probe_that_hangs_is_given_up_alone() -> None:
    async def scenario() -> None:
        router, clock, watch = await _primed(2)
        for _ in range(RULES.consecutive_failures):
            _fail(router, 1)
        clock.now += RULES.ejection_base_s
        assert router.pick(None, avoid=(0,)) == 1  # the ejected replica's probe
        probe = await _watching(watch, 1, 1)
        router.answered(0)
        clock.now += 5.0
        await _given_up(watch, probe)

    asyncio.run(scenario())


async def _taken_for_hung(router: ReplicaRouter, clock: Clock, watch: HangWatch,
                          elsewhere: Callable[[], Coroutine[Any, Any, str]]) -> list["asyncio.Task[str]"]:
    """Two requests replica 1 never answers, each with `elsewhere` for its second try, taken for hung while replica 0
    answers."""
    hung = [asyncio.create_task(watch.watched(1, _pending_forever(), elsewhere=elsewhere)) for _ in range(2)]
    await asyncio.sleep(0)
    router.answered(0)
    clock.now += 5.0
    assert watch.check() == 2
    return hung  # type: ignore[return-value]


def test_a_replica_hung_or_not_is_tried_elsewhere_too_and_the_first_answer_wins() -> None:
    async def scenario() -> None:
        router, clock, watch = await _primed(2)
        tries: list[str] = []

        async def elsewhere() -> str:
            tries.append("elsewhere")
            return "from replica 0"

        for task in await _taken_for_hung(router, clock, watch, elsewhere):
            with pytest.raises(AnsweredElsewhere) as answered:
                await task
            assert answered.value.answer == "from replica 0" and answered.value.failure_class == FailureClass.TIMEOUT
        assert tries == ["elsewhere", "elsewhere"]

        slow_answer = asyncio.Event()
        second_cancelled = asyncio.Event()

        async def slow() -> str:
            await slow_answer.wait()
            return "from replica 1"

        async def never_first() -> str:
            try:
                await asyncio.Event().wait()
            finally:
                second_cancelled.set()
            return "unreachable"

        late = [asyncio.create_task(watch.watched(1, slow(), elsewhere=never_first)) for _ in range(2)]
        await asyncio.sleep(0)
        router.answered(0)
        clock.now += 5.0
        assert watch.check() == 2 and watch.check() == 0  # each sent elsewhere once
        slow_answer.set()  # a busy replica, not a hung one: it answers first, and its answer is the one
        assert await asyncio.gather(*late) == ["from replica 1"] * 2
        await second_cancelled.wait()
        watch.close()

    asyncio.run(scenario())


def test_a_hung_request_whose_second_try_fails_is_given_up_as_a_timeout() -> None:
    async def scenario() -> None:
        router, clock, watch = await _primed(2)

        async def fails() -> str:
            raise RequestFailed(FailureClass.HTTP_5XX, "engine dead")

        for task in await _taken_for_hung(router, clock, watch, fails):
            with pytest.raises(RequestFailed) as failed:
                await task
            assert not isinstance(failed.value, AnsweredElsewhere)
            assert failed.value.failure_class == FailureClass.TIMEOUT and "engine dead" in failed.value.message
        watch.close()

    asyncio.run(scenario())


def test_a_replica_far_slower_than_its_peers_is_ejected_and_a_slow_probe_keeps_it_out() -> None:
    router, clock = _router(3)
    for _ in range(SLOW_MIN_ANSWERS):
        router.answered(0, 1.0)
        router.answered(1, 1.2)
        router.answered(2, 2.0)  # twice as slow: a slower machine, not a sick one
    assert router.snapshot().replicas[2].state == "in_service"
    for n in range(SLOW_MIN_ANSWERS * 4):
        router.answered(2, 10 * RULES.slow_factor)
        if router.snapshot().replicas[2].state == "ejected":
            break
    assert router.snapshot().replicas[2].state == "ejected"
    clock.now += RULES.ejection_base_s
    assert router.pick(None, avoid=(0, 1)) == 2
    router.answered(2, 10 * RULES.slow_factor)  # the probe answers, far too late
    router.done(2)
    assert router.snapshot().replicas[2].ejections == 2
    clock.now += 2 * RULES.ejection_base_s
    assert router.pick(None, avoid=(0, 1)) == 2
    router.answered(2, 1.1)
    router.done(2)
    assert router.snapshot().replicas[2].state == "in_service"
    quick, _ = _router(2)
    for _ in range(SLOW_MIN_ANSWERS * 4):
        quick.answered(0, 0.002)
        quick.answered(1, 0.002 + SLOW_MARGIN_S / 2)  # many times slower, but by less than the margin
    assert quick.snapshot().replicas[1].state == "in_service"


def test_a_probe_cancelled_halfway_lets_the_next_request_probe() -> None:
    router, clock = _router(2)
    for _ in range(RULES.consecutive_failures):
        _fail(router, 1)
    clock.now += RULES.ejection_base_s

    async def cancelled_probe() -> None:
        with router.routed(None, avoid=(0,)) as index:
            assert index == 1 and router.snapshot().replicas[1].state == "probing"
            raise asyncio.CancelledError  # the caller went away mid-request

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled_probe())
    stats = router.snapshot().replicas[1]
    assert (stats.state, stats.in_flight, stats.ejections) == ("ejected", 0, 1)  # neither readmitted nor struck
    assert router.pick(None, avoid=(0,)) == 1 and router.snapshot().replicas[1].state == "probing"

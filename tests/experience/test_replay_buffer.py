"""ReplayBuffer: target filtering, FIFO, age eviction, capacity back-pressure, typed stop reasons, thread safety."""

import threading

import pytest

from nemo_gym.experience.collector.prompt_source import PendingPrompt
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.errors import CollectionTimeoutError, CollectorDiedError, DataExhaustedError

pytestmark = pytest.mark.timeout(30)


def _prompt(idx: int) -> PendingPrompt:
    return PendingPrompt(datum={"idx": idx}, epoch=0, idx=idx)


def test_sample_returns_only_groups_targeted_at_the_requested_version() -> None:
    buffer = ReplayBuffer(10)
    buffer.push_with_wait_signal("a", 0, 1)
    buffer.push_with_wait_signal("b", 0, 2)
    buffer.push_with_wait_signal("c", 1, 2)
    assert buffer.sample(2, 1, 2) is None  # only one group aims at step 1
    result = buffer.sample(2, 2, 2)
    assert result["trajectories"] == ["b", "c"]
    assert result["avg_trajectory_age"] == pytest.approx(1.5)
    assert buffer.get_debug_info()["target_weight_versions"] == []  # "a" aimed at step 1 < 2: evicted


def test_sample_is_fifo_within_a_target() -> None:
    buffer = ReplayBuffer(10)
    for name in "abcd":
        buffer.push_with_wait_signal(name, 0, 1)
    assert buffer.sample(2, 1, 2)["trajectories"] == ["a", "b"]
    assert buffer.sample(2, 1, 2)["trajectories"] == ["c", "d"]


def test_groups_older_than_max_age_are_evicted_and_handed_back() -> None:
    buffer = ReplayBuffer(10)
    buffer.push_with_wait_signal("old", 0, 5, prompt=_prompt(0))
    buffer.push_with_wait_signal("young", 4, 5, prompt=_prompt(1))
    assert buffer.sample(1, 5, 2)["trajectories"] == ["young"]
    assert [e.prompt.idx for e in buffer.drain_evicted()] == [0]
    assert buffer.get_metrics()["groups_evicted"] == 1
    assert buffer.drain_evicted() == []


def test_push_to_a_full_buffer_is_refused_until_a_sample_frees_space() -> None:
    buffer = ReplayBuffer(2)
    woken = threading.Event()
    buffer.add_listener(woken.set)
    assert buffer.push_with_wait_signal("a", 0, 0) == "success"
    assert buffer.push_with_wait_signal("b", 0, 1) == "success"
    assert buffer.push_with_wait_signal("c", 0, 1) == "full"
    assert not buffer.has_space()
    buffer.sample(1, 0, 1)
    assert woken.is_set() and buffer.has_space()
    assert buffer.push_with_wait_signal("c", 0, 1) == "success"


def test_blocking_sample_raises_the_producer_stop_reason_instead_of_waiting() -> None:
    buffer = ReplayBuffer(4)
    buffer.push_with_wait_signal("a", 0, 0)
    threading.Timer(0.1, buffer.set_producer_stop, [CollectorDiedError("engine gone")]).start()
    # The stop reason, not the wait's own timeout (CollectionTimeoutError), ends the wait.
    with pytest.raises(CollectorDiedError, match="engine gone.*step 0 has 1/2"):
        buffer.sample_blocking(2, 0, 1, timeout_s=20)
    assert buffer.sample(1, 0, 1)["trajectories"] == ["a"]  # a step that can be served still is


def test_blocking_sample_times_out_with_a_typed_error() -> None:
    buffer = ReplayBuffer(4)
    with pytest.raises(CollectionTimeoutError, match="step 3 still has 0/1"):
        buffer.sample_blocking(1, 3, 1, timeout_s=0.1)
    assert buffer.get_metrics()["trainer_wait_s_last"] >= 0.1


def test_handing_back_evicted_groups_lifts_data_exhausted() -> None:
    buffer = ReplayBuffer(4)
    buffer.push_with_wait_signal("stale", 0, 0, prompt=_prompt(0))
    buffer.set_producer_stop(DataExhaustedError("no more prompts"))
    assert buffer.sample(1, 1, 1) is None  # evicts "stale": its prompt can still fill step 1
    assert len(buffer.drain_evicted()) == 1
    assert buffer.sample(1, 1, 1) is None  # the producer is running again: no error
    buffer.set_producer_stop(DataExhaustedError("no more prompts"))
    with pytest.raises(DataExhaustedError):
        buffer.sample(1, 1, 1)


def test_concurrent_pushers_and_a_blocking_sampler_lose_nothing() -> None:
    steps, per_step, pushers = 25, 4, 4
    buffer = ReplayBuffer(steps * pushers)  # room for all: this is about locking, not back-pressure

    def push(worker: int) -> None:
        for step in range(steps):
            assert buffer.push_with_wait_signal((step, worker), step, step) == "success"

    threads = [threading.Thread(target=push, args=(w,)) for w in range(pushers)]
    for thread in threads:
        thread.start()
    taken = []
    for step in range(steps):
        taken += buffer.sample_blocking(per_step, step, 1, timeout_s=10)["trajectories"]
    for thread in threads:
        thread.join()
    assert sorted(taken) == sorted((s, w) for s in range(steps) for w in range(pushers))
    assert buffer.get_metrics()["groups_sampled"] == steps * per_step


def test_state_dict_round_trip_keeps_entries_and_marks() -> None:
    buffer = ReplayBuffer(4)
    buffer.push_with_wait_signal("a", 0, 0)
    buffer.push_with_wait_signal("b", 0, 1, prompt=_prompt(1))
    buffer.sample(1, 0, 1)
    restored = ReplayBuffer(4)
    restored.load_state_dict(buffer.state_dict())
    assert restored.highest_sampled_target == 0
    assert restored.count_by_target() == {1: 1}
    assert restored.get_metrics()["groups_sampled"] == 1


def test_fill_holes_moves_the_latest_groups_into_short_earlier_steps() -> None:
    buffer = ReplayBuffer(10)
    for name, generated, target in [("a", 0, 1), ("b", 0, 2), ("c", 1, 2), ("d", 1, 3)]:
        buffer.push_with_wait_signal(name, generated, target)
    buffer.push_with_wait_signal("made on v2", 2, 4)  # newer than step 1: never moved there
    assert buffer.fill_holes(2, max_age_steps=1, current_weight_version=1) == 2
    assert buffer.sample(2, 1, 1)["trajectories"] == ["a", "d"]  # "d" came down from step 3
    assert buffer.count_by_target() == {2: 2, 3: 1}  # "made on v2" came down to 3; only the last step is short

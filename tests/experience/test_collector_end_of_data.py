"""The end of the data (issue 30): every healthy prompt of the last epoch is trained or reported; only one final
step that cannot be filled may be left, and the DataExhaustedError names its prompts."""

import random
from typing import Optional

import pytest

from nemo_gym.experience.collector.prompt_source import PendingPrompt
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.errors import DataExhaustedError
from tests.experience.collector_fakes import ScriptedRolloutManager, no_thread_leak, running_collector

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures(no_thread_leak.__name__)]

ALWAYS_FAIL, FAIL_ONCE = (9, 10), (0, 2)
# Loader order: 16 prompts fill steps 0-7, then 9 and 10 (step 8), then 3, 4 (step 9) and 19, 21 (step 10).
LAST_DRAWN = [9, 10, 3, 4, 19, 21]
ORDER = [i for i in range(22) if i not in LAST_DRAWN] + LAST_DRAWN


def test_groups_that_fail_after_later_steps_filled_leave_no_prompt_untrained() -> None:
    """The issue's scenario: 22 prompts, 2 a step, max age 3, a buffer of 16, loader batches of 3, one epoch; 9 and
    10 always fail, 0 and 2 once; 2 attempts a group. Before the fix the trainer got DataExhaustedError at step 8 and
    3, 4, 19 and 21 were neither trained nor reported.

    The order is made by state, not by latencies: each attempt of 9 and 10 fails only once the rollouts of 3, 4, 19
    and 21 have returned, so step 8 is left empty while steps 9 and 10 are full. The trainer sets each new version
    without draining generation (no prepare_for_refit), so 9 and 10 outlive versions as slow groups do. No group hangs,
    so the group timeout is off and nothing here depends on the clock; the seeded 3-200 ms latencies only reorder
    completions, which the verdict must not depend on.
    """
    rng = random.Random(30)
    manager = ScriptedRolloutManager(fail_always=ALWAYS_FAIL, fail_first=FAIL_ONCE,
                                     slow={i: rng.uniform(0.003, 0.2) for i in range(22)})
    later_steps_full = lambda: all(manager.returned[i] for i in (3, 4, 19, 21))  # noqa: E731
    manager.gates = {9: later_steps_full, 10: later_steps_full}
    with running_collector(manager, 22, prompts_per_step=2, max_age=3, batch_size=3, buffer_size=16, order=ORDER,
                           max_epochs=1, max_group_attempts=2, group_timeout_s=None,
                           in_flight_weight_updates=False) as (collector, buffer):
        trained, step = [], 0
        while True:
            try:
                batch = buffer.sample_blocking(2, step, 3, timeout_s=30)
            except DataExhaustedError as exc:
                exhausted = exc
                break
            assert all(0 <= step - e.generation_weight_version <= 3 for e in batch["entries"])
            trained += [e.prompt.idx for e in batch["entries"]]
            step += 1
            collector.set_weight_version(step)
        failed = collector.get_failed_groups()
        left = buffer.state_dict()["entries"]

    assert sorted(trained) == [i for i in range(22) if i not in ALWAYS_FAIL]  # all 20 healthy prompts, once each
    assert [(f.idx, f.attempts) for f in sorted(failed, key=lambda f: f.idx)] == [(9, 2), (10, 2)]
    assert step == 10 and left == []
    assert "step 10 has 0/2 groups" in str(exhausted) and exhausted.untrained_prompts == ()


def _buffer_with(groups: list[tuple[int, int, int]], sampled_up_to: Optional[int]) -> ReplayBuffer:
    """A buffer whose trainer has taken steps up to `sampled_up_to` (None: none yet), holding (idx, generated on,
    target) groups."""
    buffer = ReplayBuffer(16)
    if sampled_up_to is not None:
        buffer.push_with_wait_signal("taken", sampled_up_to, sampled_up_to)
        buffer.sample(1, sampled_up_to, 3)
    for idx, generated, target in groups:
        buffer.push_with_wait_signal(f"g{idx}", generated, target, prompt=PendingPrompt({"idx": idx}, 0, idx))
    return buffer


def test_an_empty_step_before_full_ones_is_filled_from_the_latest_step() -> None:
    buffer = _buffer_with([(3, 7, 9), (4, 7, 9), (19, 8, 10), (21, 8, 10)], sampled_up_to=7)
    assert buffer.fill_holes(2, 3, current_weight_version=8) == 2
    assert buffer.count_by_target() == {8: 2, 9: 2}
    assert buffer.sample(2, 8, 3)["trajectories"] == ["g19", "g21"]


def test_steps_before_the_trainers_version_are_never_filled() -> None:
    buffer = _buffer_with([(1, 4, 6), (2, 4, 7)], sampled_up_to=None)  # a trainer starting at step 5
    assert buffer.fill_holes(2, 3, current_weight_version=5) == 2
    assert buffer.count_by_target() == {5: 2}


def test_data_exhausted_names_the_prompts_of_the_step_that_cannot_be_filled() -> None:
    buffer = _buffer_with([(5, 8, 8)], sampled_up_to=7)
    buffer.set_producer_stop(DataExhaustedError("no more prompts"))
    with pytest.raises(DataExhaustedError, match=r"step 8 has 1/2 groups .*never trained, .*\[\(0, 5\)\]") as caught:
        buffer.sample(2, 8, 3)
    assert caught.value.untrained_prompts == ((0, 5),)

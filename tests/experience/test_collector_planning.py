"""Target planning: the reference's target windows, and gap filling by count (lowest target that needs groups)."""

import pytest

from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from tests.experience.collector_fakes import ScriptedRolloutManager, master_config

pytestmark = pytest.mark.timeout(30)


def _collector(buffer: ReplayBuffer, start_step: int = 0, prompts: int = 2, age: int = 4) -> AsyncTrajectoryCollector:
    return AsyncTrajectoryCollector(None, None, {}, master_config(prompts, age), buffer, start_step,
                                    rollout_manager=ScriptedRolloutManager())


def test_target_windows_match_the_reference() -> None:
    collector = _collector(ReplayBuffer(10), start_step=3)
    assert collector._calculate_target_weights(10) == [11, 12, 13, 14]
    assert collector._calculate_target_weights(3) == [3, 4, 5, 6, 7]  # the first step gets data too


def test_next_target_is_the_lowest_that_still_needs_groups() -> None:
    buffer = ReplayBuffer(10)
    collector = _collector(buffer, prompts=2, age=1)
    for target in (0, 0, 1):
        buffer.push_with_wait_signal("g", 0, target)
    assert collector._get_next_target_for_generation(0) == 1
    buffer.push_with_wait_signal("g", 0, 1)
    assert collector._get_next_target_for_generation(0) is None  # window [0, 1] full: idle until a new version


def test_a_hole_in_the_current_step_is_planned_for_although_its_window_has_passed() -> None:
    buffer = ReplayBuffer(10)
    collector = _collector(buffer, prompts=2, age=1)
    for target in (0, 0, 1):  # step 1's second group failed for good
        buffer.push_with_wait_signal("g", 0, target)
    buffer.sample(2, 0, 1)
    collector.set_weight_version(1)
    assert collector._calculate_target_weights(1) == [2]  # the reference plans only this: step 1 never fills
    assert collector._get_next_target_for_generation(1) == 1
    buffer.push_with_wait_signal("refill", 1, 1)
    assert collector._get_next_target_for_generation(1) == 2

"""Wedge: a permanently failed group leaves a hole in its target. The reference never refills a target at or
below the current version, so the trainer waits forever; here the slot is refilled and the failure reported."""

import pytest

from tests.experience.collector_fakes import ScriptedRolloutManager, no_thread_leak, running_collector, train_step

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_permanently_failed_group_hole_is_refilled_with_the_next_prompt() -> None:
    manager = ScriptedRolloutManager(fail_always={3})
    with running_collector(manager, 9, max_epochs=1, max_group_attempts=3) as (collector, buffer):
        trained = train_step(collector, buffer, 0, 4, 2, timeout_s=5) + train_step(collector, buffer, 1, 4, 2,
                                                                                   timeout_s=5)
        assert sorted(idx for _, idx in trained) == [0, 1, 2, 4, 5, 6, 7, 8]
        [failed] = collector.get_failed_groups()
        assert (failed.epoch, failed.idx, failed.attempts) == (0, 3, 3)
        assert "PromptGroupError" in failed.error
        metrics = collector.get_metrics()
        assert (metrics["groups_failed"], metrics["group_attempts_failed"]) == (1, 3)


def test_hole_in_the_current_step_is_gap_filled_at_the_current_version() -> None:
    # In order, prompts 0-1 fill step 0 and 2-3 step 1, both on version 0; 4-5 (step 2) start only on version 1.
    # Prompt 3 fails once 4 and 5 have returned, so after the trainer moved to version 1 and step 2 is full.
    manager = ScriptedRolloutManager(fail_always={3})
    manager.gates = {3: lambda: manager.returned[4] > 0 and manager.returned[5] > 0}
    with running_collector(manager, 20, prompts_per_step=2, max_age=1, shuffle=False, max_group_attempts=1,
                           max_concurrent_groups=4, in_flight_weight_updates=True) as (collector, buffer):
        train_step(collector, buffer, 0, 2, 1, timeout_s=5)
        step1 = buffer.sample_blocking(2, 1, 1, timeout_s=5)["entries"]
        refill = [e for e in step1 if e.prompt.idx != 2]
        assert [(e.prompt.idx, e.generation_weight_version) for e in refill] == [(6, 1)]
        assert [f.idx for f in collector.get_failed_groups()] == [3]

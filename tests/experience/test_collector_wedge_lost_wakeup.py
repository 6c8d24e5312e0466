"""Wedge: a lost wake-up between pause/refit and a new weight version. The reference checks "all targets full",
then clears its wake event and waits: a set_weight_version landing in between is lost, the next target is never
generated and the trainer waits forever. Here the wait is on state, so the update is always seen."""

import pytest

from tests.experience.collector_fakes import (
    ScriptedRolloutManager,
    no_thread_leak,
    running_collector,
    train_step,
    wait_for,
)

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_version_update_landing_between_the_limit_check_and_the_wait_is_not_lost() -> None:
    with running_collector(ScriptedRolloutManager(), 40) as (collector, buffer):
        plan = collector._get_next_target_for_generation
        injected = []

        def plan_then_update_lands(version: int):
            target = plan(version)
            # The window is full and the trainer has taken step 0: deliver its version update right after the
            # check said "nothing to do", before the collector goes to sleep.
            if target is None and buffer.highest_sampled_target == 0 and not injected:
                injected.append(version)
                collector.set_weight_version(1)
            return target

        collector._get_next_target_for_generation = plan_then_update_lands
        assert wait_for(lambda: buffer.count_by_target() == {0: 4, 1: 4, 2: 4}, 5)
        buffer.sample_blocking(4, 0, 2, timeout_s=5)
        # Nobody else touches the collector now: only the injected update can get step 3 generated.
        assert wait_for(lambda: buffer.count_by_target().get(3) == 4, 5), buffer.count_by_target()
        assert injected == [0]


def test_refit_and_pause_cycles_never_strand_the_collector() -> None:
    with running_collector(ScriptedRolloutManager(delay_s=0.0), 200, prompts_per_step=2, max_age=1) as (collector,
                                                                                                       buffer):
        for step in range(40):
            buffer.sample_blocking(2, step, 1, timeout_s=5)
            if step % 2:  # the version lands while paused for refit
                collector.prepare_for_refit(timeout_s=5)
                collector.set_weight_version(step + 1)
                collector.resume_after_refit()
            else:  # ... or while manually paused, resumed before the refit ends
                collector.pause()
                collector.prepare_for_refit(timeout_s=5)
                collector.set_weight_version(step + 1)
                collector.resume()
                collector.resume_after_refit()
        assert collector.get_metrics()["groups_sampled"] == 80


def test_a_version_set_during_a_pause_is_used_by_the_groups_started_after_resume() -> None:
    with running_collector(ScriptedRolloutManager(), 40, prompts_per_step=2, max_age=1) as (collector, buffer):
        train_step(collector, buffer, 0, 2, 1, timeout_s=5)
        collector.pause()
        collector.set_weight_version(2)
        # Nothing is generating while paused: the groups for step 3 can only start after resume.
        assert wait_for(lambda: collector.get_metrics()["groups_in_flight"] == 0, 20)
        collector.resume()
        assert wait_for(lambda: buffer.count_by_target().get(3) == 2, 5)
        assert {v for v, t in zip(buffer.get_debug_info()["trajectory_versions"],
                                  buffer.get_debug_info()["target_weight_versions"]) if t == 3} == {2}

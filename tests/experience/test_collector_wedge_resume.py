"""Wedge: a resume that orphans the next step. The reference restored a complete batch for step N, moved its
"fully generated" mark past it and went on to N+2, so step N+1 never got data. Here each target's need is
recomputed from the restored groups."""

import pytest

from tests.experience.collector_fakes import (
    ScriptedRolloutManager,
    no_thread_leak,
    running_collector,
    train_step,
    wait_for,
)

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_resume_with_a_complete_batch_for_step_n_does_not_orphan_step_n_plus_1(tmp_path) -> None:
    checkpoint = tmp_path / "collector.pt"
    with running_collector(ScriptedRolloutManager(), 60, prompts_per_step=2, max_age=1) as (collector, buffer):
        for step in range(3):
            train_step(collector, buffer, step, 2, 1, timeout_s=5)
        assert wait_for(lambda: buffer.count_by_target().get(3, 0) == 2, 20)
        collector.pause()
        collector.wait_for_pending_generations(timeout_s=5)
        collector.save_checkpoint(checkpoint)
        saved_step3 = {e.prompt.key for e in buffer.state_dict()["entries"] if e.target_weight_version == 3}
    assert len(saved_step3) == 2  # the checkpoint holds a complete batch for step N = 3

    with running_collector(ScriptedRolloutManager(), 60, prompts_per_step=2, max_age=1, start_step=3,
                           checkpoint=checkpoint) as (collector, buffer):
        assert set(train_step(collector, buffer, 3, 2, 1, timeout_s=5)) == saved_step3  # kept, not regenerated
        for step in (4, 5):  # N+1 gets data, and the run goes on
            train_step(collector, buffer, step, 2, 1, timeout_s=5)

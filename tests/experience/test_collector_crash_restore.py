"""Checkpoint mid-run, crash (the first collector is abandoned, not stopped: it keeps generating into a buffer
nobody reads), restore in a fresh collector: the run continues with no prompt group duplicated and none lost."""

from collections import Counter

import pytest

from tests.experience.collector_fakes import (
    ALWAYS_FAIL,
    DATASET,
    EPOCHS,
    MAX_AGE,
    PROMPTS_PER_STEP,
    SCENARIO_KNOBS,
    no_thread_leak,
    running_collector,
    scenario_manager,
    train_step,
    train_until_exhausted,
)

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_checkpoint_then_crash_then_restore_loses_and_repeats_nothing(tmp_path) -> None:
    path = tmp_path / "collector.pt"
    knobs = dict(SCENARIO_KNOBS, in_flight_weight_updates=True)
    trained = []
    with running_collector(scenario_manager(), DATASET, **knobs) as (crashed, crashed_buffer):
        for step in range(9):  # crosses the first epoch boundary (28 trainable prompts an epoch)
            trained += train_step(crashed, crashed_buffer, step, PROMPTS_PER_STEP, MAX_AGE, train_time_s=0.01)
        crashed.save_checkpoint(path)
        for step in range(9, 12):  # trained after the checkpoint, then the crash: this work is lost
            train_step(crashed, crashed_buffer, step, PROMPTS_PER_STEP, MAX_AGE)

        # The crashed collector is still running: the restore must not depend on it stopping.
        with running_collector(scenario_manager(), DATASET, start_step=9, checkpoint=path, **knobs) as (collector,
                                                                                                   buffer):
            resumed, last_step = train_until_exhausted(collector, buffer, 9, PROMPTS_PER_STEP, MAX_AGE,
                                                       train_time_s=0.01)
            failed = collector.get_failed_groups()
    trained += resumed

    assert last_step == 21
    expected = Counter((e, i) for e in range(EPOCHS) for i in range(DATASET) if i not in ALWAYS_FAIL)
    assert Counter(trained) == expected
    assert sorted((f.epoch, f.idx) for f in failed) == sorted((e, i) for e in range(EPOCHS) for i in ALWAYS_FAIL)

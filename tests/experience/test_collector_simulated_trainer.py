"""A simulated trainer drives the collector through 21 weight versions with max age 2, stragglers, transient and
permanent failures and two epoch boundaries: every step gets exactly its own groups, none older than 2 versions,
and every prompt of every epoch is trained exactly once, except the reported permanent failures."""

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
    train_until_exhausted,
)

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_simulated_trainer_over_three_epochs_with_stragglers_and_failures() -> None:
    with running_collector(scenario_manager(), DATASET, **SCENARIO_KNOBS) as (collector, buffer):
        trained, last_step = train_until_exhausted(collector, buffer, 0, PROMPTS_PER_STEP, MAX_AGE,
                                                   train_time_s=0.01)
        metrics = collector.get_metrics()
        failed = collector.get_failed_groups()

    # (30 - 2 failing) prompts x 3 epochs = 84 groups = 21 full steps; the ages were checked in train_step.
    assert last_step == 21 and len(trained) == 84
    expected = Counter((e, i) for e in range(EPOCHS) for i in range(DATASET) if i not in ALWAYS_FAIL)
    assert Counter(trained) == expected  # each prompt once per epoch; none lost, none repeated
    assert sorted((f.epoch, f.idx) for f in failed) == sorted((e, i) for e in range(EPOCHS) for i in ALWAYS_FAIL)
    assert metrics["group_timeouts"] == 3 and metrics["groups_failed"] == 6
    assert metrics["group_attempts_failed"] == 3 + 2 + 6 * 2  # stragglers, transient, permanent x 2 attempts
    assert metrics["groups_generated"] == metrics["groups_sampled"] == 84
    assert metrics["epoch"] == EPOCHS and metrics["weight_version"] == 21

"""Wedge: the end of the dataloader. The reference iterates it once and then stops silently while the trainer
waits; here the next epoch starts, and after `max_epochs` the trainer gets DataExhaustedError."""

from collections import defaultdict

import pytest

from nemo_gym.experience.errors import DataExhaustedError
from tests.experience.collector_fakes import (ScriptedRolloutManager, no_thread_leak, running_collector, train_step,
                                             wait_for)

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_epoch_end_starts_the_next_epoch_and_training_continues_across_it() -> None:
    with running_collector(ScriptedRolloutManager(), 6, batch_size=4) as (collector, buffer):
        trained = [key for step in range(6) for key in train_step(collector, buffer, step, 4, 2, timeout_s=5)]
        by_epoch = defaultdict(list)
        for epoch, idx in trained:
            by_epoch[epoch].append(idx)
        assert {epoch: sorted(idxs) for epoch, idxs in by_epoch.items()} == {e: list(range(6)) for e in range(4)}
        # The collector goes on into the fifth epoch on its own thread: waited for, not raced.
        assert wait_for(lambda: collector.get_metrics()["epoch"] >= 4, timeout_s=10), collector.get_metrics()


def test_end_of_the_last_epoch_raises_data_exhausted_instead_of_waiting() -> None:
    with running_collector(ScriptedRolloutManager(), 10, max_epochs=1) as (collector, buffer):
        for step in range(2):
            train_step(collector, buffer, step, 4, 2, timeout_s=5)
        with pytest.raises(DataExhaustedError, match="step 2 has 2/4 groups"):
            buffer.sample_blocking(4, 2, 2, timeout_s=10)
        with pytest.raises(DataExhaustedError):
            buffer.sample(4, 2, 2)  # the polling form says so too, instead of returning None forever

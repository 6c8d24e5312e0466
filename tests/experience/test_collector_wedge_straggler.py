"""Wedge: a straggler in a prompt group. The reference waits for it forever (and a resume re-draws the same batch
and hangs again); here a group past `group_timeout_s` is cancelled and retried, then reported."""

import pytest

from nemo_gym.experience.errors import DataExhaustedError
from tests.experience.collector_fakes import ScriptedRolloutManager, no_thread_leak, running_collector, train_step

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_straggler_group_is_cancelled_and_retried_so_its_step_fills() -> None:
    manager = ScriptedRolloutManager(hang_first={1, 6})
    with running_collector(manager, 8, max_epochs=1, group_timeout_s=0.2) as (collector, buffer):
        trained = train_step(collector, buffer, 0, 4, 2, timeout_s=5) + train_step(collector, buffer, 1, 4, 2,
                                                                                   timeout_s=5)
        assert sorted(idx for _, idx in trained) == list(range(8))
        assert collector.get_metrics()["group_timeouts"] == 2
        assert manager.attempts[1] == manager.attempts[6] == 2
        assert collector.get_failed_groups() == []


def test_prompt_that_always_straggles_is_reported_and_its_slot_refilled() -> None:
    manager = ScriptedRolloutManager(hang_always={2})
    with running_collector(manager, 9, max_epochs=1, group_timeout_s=0.1, max_group_attempts=2) as (collector,
                                                                                                     buffer):
        trained = train_step(collector, buffer, 0, 4, 2, timeout_s=5) + train_step(collector, buffer, 1, 4, 2,
                                                                                   timeout_s=5)
        assert sorted(idx for _, idx in trained) == [0, 1, 3, 4, 5, 6, 7, 8]
        [failed] = collector.get_failed_groups()
        assert (failed.idx, failed.attempts) == (2, 2) and failed.error.startswith("GroupTimeoutError")
        with pytest.raises(DataExhaustedError, match="1 prompt group"):
            buffer.sample_blocking(4, 2, 2, timeout_s=5)

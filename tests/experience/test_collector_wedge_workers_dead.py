"""Wedge: every generation worker is dead while the trainer waits. The reference's trainer polled an empty buffer
for hours; here N failed attempts in a row (errors or straggler timeouts) stop collection and the trainer's
waiting sample raises CollectorDiedError."""

import pytest

from nemo_gym.experience.errors import CollectorDiedError
from tests.experience.collector_fakes import ScriptedRolloutManager, no_thread_leak, running_collector, train_step

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_all_workers_failing_raise_collector_died_in_the_waiting_trainer() -> None:
    manager = ScriptedRolloutManager()
    with running_collector(manager, 100, max_consecutive_failures=4) as (collector, buffer):
        train_step(collector, buffer, 0, 4, 2, timeout_s=5)
        manager.kill()
        # The stop reason, not the trainer's own timeout (CollectionTimeoutError), ends the wait.
        with pytest.raises(CollectorDiedError, match="4 prompt group attempts failed in a row.*engine is down"):
            for step in range(1, 10):
                train_step(collector, buffer, step, 4, 2, timeout_s=20)
        with pytest.raises(CollectorDiedError):
            collector.check_health()


def test_a_hung_engine_is_detected_through_group_timeouts() -> None:
    manager = ScriptedRolloutManager()
    manager.hang_everything = True
    with running_collector(manager, 100, group_timeout_s=0.1, max_consecutive_failures=6) as (collector, buffer):
        with pytest.raises(CollectorDiedError, match="GroupTimeoutError"):
            buffer.sample_blocking(4, 0, 2, timeout_s=20)
        assert collector.get_metrics()["group_timeouts"] >= 6


def test_a_rollout_manager_bug_stops_collection_at_once() -> None:
    class Broken(ScriptedRolloutManager):
        async def run_rollout(self, input_sample):
            raise KeyError("message_log")

    with running_collector(Broken(), 100) as (collector, buffer):
        with pytest.raises(CollectorDiedError, match="rollout manager raised KeyError") as caught:
            buffer.sample_blocking(4, 0, 2, timeout_s=20)
        assert isinstance(caught.value.__cause__.__cause__, KeyError)
        with pytest.raises(CollectorDiedError):
            buffer.sample(4, 0, 2)  # polling raises too, instead of returning None forever

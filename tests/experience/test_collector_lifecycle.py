"""The collector's lifecycle: construction from a master config, dataloader shapes, pause and refit, shutdown
(no thread left, a waiting trainer told why), metrics, and misuse that is refused."""

import threading
import types

import pytest
import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.rollout_runner import GroupRetrier, RolloutRunner
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.errors import (
    CollectionTimeoutError,
    CollectorCheckpointError,
    CollectorDiedError,
    CollectorShutdownError,
    DataExhaustedError,
)
from nemo_gym.experience.rollout_manager import RolloutManager
from tests.experience.collector_fakes import (
    ScriptedRolloutManager,
    collector_threads,
    master_config,
    no_thread_leak,
    running_collector,
    train_step,
    wait_for,
)

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_shutdown_cancels_running_groups_and_a_waiting_trainer_gets_a_shutdown_error() -> None:
    manager = ScriptedRolloutManager()
    manager.hang_everything = True
    errors = []
    with running_collector(manager, 40, group_timeout_s=None) as (collector, buffer):
        def trainer() -> None:
            try:
                buffer.sample_blocking(4, 0, 2)
            except CollectorShutdownError as exc:
                errors.append(exc)

        waiting = threading.Thread(target=trainer)
        waiting.start()
        assert wait_for(lambda: collector.get_metrics()["groups_in_flight"] == 8, 20), collector.get_metrics()
        collector.shutdown()
        waiting.join(5)
        assert not waiting.is_alive() and len(errors) == 1
        assert collector_threads() == []


def test_a_buffer_smaller_than_the_generation_window_is_refused() -> None:
    with pytest.raises(ValueError, match="max_size 11 < .* = 12"):
        AsyncTrajectoryCollector(None, None, {}, master_config(4, 2), ReplayBuffer(11),
                                 rollout_manager=ScriptedRolloutManager())


def test_the_rollout_manager_is_built_from_the_master_config_when_not_given(monkeypatch) -> None:
    built = {}

    class RecordingRolloutManager:
        def __init__(self, **kwargs) -> None:
            built.update(kwargs)

    module = types.ModuleType("nemo_gym.experience.rollout_manager")
    module.RolloutManager = RecordingRolloutManager
    monkeypatch.setitem(__import__("sys").modules, "nemo_gym.experience.rollout_manager", module)
    config = master_config(4, 2)
    config["grpo"]["max_rollout_turns"] = 3
    config["env"] = {"should_use_nemo_gym": True}
    policy, tokenizer, envs = object(), object(), {"math": object()}
    collector = AsyncTrajectoryCollector(policy, tokenizer, envs, config, ReplayBuffer(12))
    assert isinstance(collector.rollout_manager, RecordingRolloutManager)
    assert built == {"tokenizer": tokenizer, "task_to_env": envs, "num_generations_per_prompt": 2,
                     "max_seq_len": 512, "max_rollout_turns": 3, "policy_generation": policy,
                     "generation_config": {"max_new_tokens": 16}, "use_nemo_gym": True}


def test_a_rollout_manager_without_run_rollout_is_refused_and_ours_takes_the_group_budget() -> None:
    class NotAManager:
        def generate(self) -> None: ...

    with pytest.raises(TypeError, match="rollout_manager needs an async run_rollout.*NotAManager has none"):
        AsyncTrajectoryCollector(None, None, {}, master_config(2, 1), ReplayBuffer(8), rollout_manager=NotAManager())
    assert issubclass(ScriptedRolloutManager, RolloutRunner) and not issubclass(ScriptedRolloutManager, GroupRetrier)
    assert issubclass(RolloutManager, RolloutRunner) and issubclass(RolloutManager, GroupRetrier)


def test_columnar_batched_data_dict_batches_are_collected() -> None:
    def batch(start: int) -> BatchedDataDict:
        return BatchedDataDict(message_log=[[], []], extra_env_info=[None, None], task_name=["t", "t"],
                               idx=torch.tensor([start, start + 1]))

    buffer = ReplayBuffer(8)
    collector = AsyncTrajectoryCollector(None, None, {}, master_config(2, 1, max_epochs=1), buffer,
                                         rollout_manager=ScriptedRolloutManager())
    try:
        collector.start_collection([batch(0), batch(2)])
        trained = train_step(collector, buffer, 0, 2, 1) + train_step(collector, buffer, 1, 2, 1)
        assert sorted(trained) == [(0, 0), (0, 1), (0, 2), (0, 3)]
        with pytest.raises(DataExhaustedError):
            buffer.sample_blocking(2, 2, 1, timeout_s=5)
    finally:
        collector.shutdown()


def test_refit_waits_for_running_generations() -> None:
    held = threading.Event()
    manager = ScriptedRolloutManager(gates={i: held.is_set for i in range(40)})
    with running_collector(manager, 40) as (collector, _):
        assert wait_for(lambda: manager.running == 8, 20), manager.running
        with pytest.raises(CollectionTimeoutError, match="8 prompt group"):
            collector.prepare_for_refit(timeout_s=0.1)  # the groups cannot finish before `held` is set
        held.set()
        collector.prepare_for_refit(timeout_s=20)
        assert manager.running == 0 and sum(manager.returned.values()) == 8
        collector.resume_after_refit()


def test_with_in_flight_weight_updates_refit_does_not_wait() -> None:
    manager = ScriptedRolloutManager(gates={i: lambda: False for i in range(40)})  # never finish; shutdown cancels
    with running_collector(manager, 40, in_flight_weight_updates=True) as (collector, _):
        assert wait_for(lambda: manager.running == 8, 20), manager.running
        collector.prepare_for_refit(timeout_s=0.1)
        assert manager.running == 8 and collector.get_metrics()["groups_in_flight"] == 8
        collector.resume_after_refit()


def test_pause_stops_new_group_starts_until_resume() -> None:
    manager = ScriptedRolloutManager()
    with running_collector(manager, 400, prompts_per_step=2, max_age=1) as (collector, buffer):
        train_step(collector, buffer, 0, 2, 1)
        collector.pause()
        assert wait_for(lambda: collector.get_metrics()["groups_in_flight"] == 0, 20)
        attempts = sum(manager.attempts.values())
        collector.set_weight_version(5)  # plenty to do, but paused
        # Proof that the collector looked at its state while paused: evicted groups (aimed below step 5) are handed
        # back, and it re-queues them in the same pass in which it would start groups.
        held = buffer.size()
        assert held >= 2 and buffer.sample(2, 5, 1) is None
        assert wait_for(lambda: collector.get_metrics()["prompts_requeued"] == held, 20)
        assert collector.get_metrics()["groups_in_flight"] == 0
        assert sum(manager.attempts.values()) == attempts
        collector.resume()
        batch = buffer.sample_blocking(2, 5, 1, timeout_s=20)
        assert {e.generation_weight_version for e in batch["entries"]} == {5}


def test_in_flight_refit_invalidates_kv_caches_when_configured() -> None:
    class Policy:
        invalidations = 0

        def invalidate_kv_cache(self) -> bool:
            Policy.invalidations += 1
            return True

    config = master_config(2, 1, in_flight_weight_updates=True, recompute_kv_cache_after_weight_updates=True)
    collector = AsyncTrajectoryCollector(Policy(), None, {}, config, ReplayBuffer(4),
                                         rollout_manager=ScriptedRolloutManager())
    collector.prepare_for_refit()
    collector.resume_after_refit()
    assert Policy.invalidations == 1
    with pytest.raises(ValueError, match="invalidate_kv_cache"):
        AsyncTrajectoryCollector(object(), None, {}, config, ReplayBuffer(4),
                                 rollout_manager=ScriptedRolloutManager())


def test_metrics_carry_the_counters_a_trainer_logs() -> None:
    with running_collector(ScriptedRolloutManager(), 40) as (collector, buffer):
        train_step(collector, buffer, 0, 4, 2)
        metrics = collector.get_metrics()
    for key in ("groups_generated", "groups_sampled", "groups_evicted", "groups_failed", "group_timeouts",
                "generation_time_s_mean", "generation_time_s_max", "trainer_wait_s_total", "trainer_wait_s_last",
                "buffer_size", "buffer_size_per_target", "weight_version", "epoch", "groups_in_flight"):
        assert key in metrics, key
    assert metrics["groups_sampled"] == 4 and metrics["generation_time_s_mean"] > 0


def test_loading_a_checkpoint_into_a_started_collector_or_from_a_foreign_file_is_refused(tmp_path) -> None:
    foreign = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(1)}, foreign)
    with running_collector(ScriptedRolloutManager(), 40) as (collector, _):
        with pytest.raises(CollectorCheckpointError, match="is not a nemo_gym.async_trajectory_collector"):
            collector.load_checkpoint(foreign)
        collector.save_checkpoint(tmp_path / "ok.pt")
        with pytest.raises(CollectorCheckpointError, match="before start_collection"):
            collector.load_checkpoint(tmp_path / "ok.pt")


def test_a_dataloader_that_raises_stops_collection_with_collector_died() -> None:
    class BrokenLoader:
        def __iter__(self):
            raise OSError("shard 3 unreadable")

        def state_dict(self) -> dict:
            return {}

        def load_state_dict(self, state: dict) -> None:
            pass

    buffer = ReplayBuffer(12)
    collector = AsyncTrajectoryCollector(None, None, {}, master_config(4, 2), buffer,
                                         rollout_manager=ScriptedRolloutManager())
    try:
        collector.start_collection(BrokenLoader())
        with pytest.raises(CollectorDiedError, match="OSError: shard 3 unreadable"):
            buffer.sample_blocking(4, 0, 2, timeout_s=5)
    finally:
        collector.shutdown()

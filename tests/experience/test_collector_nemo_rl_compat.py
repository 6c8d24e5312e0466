"""NeMo RL's compatibility methods, each pinned: the collector's `get_weight_version` and `get_dataloader_state`, the
replay buffer's `get_existing_target_weights`, `has_complete_batch`, `get_trajectories_needed`, `size`,
`get_debug_info` and `clear`, and `BatchedDataDict.get_dict`; and NeMo RL's module names resolve to ours."""

import importlib

import pytest
import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from tests.experience.collector_fakes import (
    ScriptedRolloutManager,
    make_dataset,
    master_config,
    no_thread_leak,
    running_collector,
    train_step,
    wait_for,
)

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_get_weight_version_is_the_start_step_then_the_last_version_set() -> None:
    collector = AsyncTrajectoryCollector(None, None, {}, master_config(2, 1), ReplayBuffer(4), start_step=7,
                                         rollout_manager=ScriptedRolloutManager())
    assert collector.get_weight_version() == 7
    collector.set_weight_version(9)
    assert collector.get_weight_version() == 9


def test_get_dataloader_state_is_the_loaders_own_cursor() -> None:
    held = {"open": False}
    manager = ScriptedRolloutManager(gates={i: lambda: held["open"] for i in range(12)})
    with running_collector(manager, 12, prompts_per_step=2, max_age=1, batch_size=3, shuffle=False) as (collector,
                                                                                                      buffer):
        assert wait_for(lambda: manager.running == 2, 20)  # max_concurrent_groups = 2 x 1: prompts 0 and 1
        # One batch of 3 was drawn (prompt 2 waits in it): the cursor is past it, ahead of anything generated.
        assert collector.get_dataloader_state() == {"epoch": 0, "batches_yielded": 1, "seed": 0, "shuffle": False,
                                                    "batch_size": 3, "dataset_size": 12, "drop_last": False}
        resumed = StatefulPromptLoader(make_dataset(12), 3, shuffle=False)
        resumed.load_state_dict(collector.get_dataloader_state())
        assert [d["idx"] for batch in resumed for d in batch] == list(range(3, 12))
        held["open"] = True
        train_step(collector, buffer, 0, 2, 1)


def test_get_dataloader_state_before_start_is_empty() -> None:
    collector = AsyncTrajectoryCollector(None, None, {}, master_config(2, 1), ReplayBuffer(4),
                                         rollout_manager=ScriptedRolloutManager())
    assert collector.get_dataloader_state() == {}


def test_replay_buffer_inspection_by_target() -> None:
    buffer = ReplayBuffer(6)
    assert buffer.get_existing_target_weights() == set() and buffer.size() == 0
    for generated, target in [(0, 1), (0, 1), (0, 3)]:
        buffer.push_with_wait_signal("group", generated, target)
    assert buffer.get_existing_target_weights() == {1, 3} and buffer.size() == 3
    assert (buffer.has_complete_batch(1, 2), buffer.get_trajectories_needed(1, 2)) == (True, 0)
    assert (buffer.has_complete_batch(3, 2), buffer.get_trajectories_needed(3, 2)) == (False, 1)
    assert (buffer.has_complete_batch(2, 2), buffer.get_trajectories_needed(2, 2)) == (False, 2)
    assert buffer.get_debug_info() == {"total_trajectories": 3, "trajectory_versions": [0, 0, 0],
                                       "target_weight_versions": [1, 1, 3], "max_size": 6}
    buffer.sample(2, 1, 1)
    assert buffer.get_existing_target_weights() == {3}


def test_clear_drops_every_group_without_handing_it_back() -> None:
    buffer = ReplayBuffer(4)
    woken = []
    buffer.add_listener(lambda: woken.append(True))
    buffer.push_with_wait_signal("group", 0, 1)
    buffer.clear()
    assert buffer.size() == 0 and buffer.drain_evicted() == [] and woken == [True]
    assert buffer.get_metrics()["groups_evicted"] == 0


def test_batched_data_dict_get_dict_is_a_plain_dict_of_the_same_columns() -> None:
    batch = BatchedDataDict(idx=torch.tensor([3, 4]), task_name=["a", "b"])
    plain = batch.get_dict()
    assert type(plain) is dict and plain.keys() == batch.keys()
    assert plain["idx"] is batch["idx"] and plain["task_name"] is batch["task_name"]  # the columns, not copies
    plain["extra"] = [1, 2]
    assert "extra" not in batch


@pytest.mark.parametrize("nemo_rl_path, ours, names", [
    ("experience.rollouts", "experience.turns.rollouts",
     ["run_multi_turn_rollout", "run_async_multi_turn_rollout", "run_sample_multi_turn_rollout", "generate_responses",
      "generate_responses_async", "calculate_rewards"]),
    ("experience.rollout_manager", "experience.rollout_manager",
     ["RolloutManager", "AsyncRolloutImpl", "AsyncNemoGymRolloutImpl"]),
    ("experience.interfaces", "experience.interfaces", ["PromptGroupRecord", "Completion"]),
    ("algorithms.async_utils", "experience.collector", ["AsyncTrajectoryCollector", "ReplayBuffer"]),
    ("algorithms.async_utils.trajectory_collector", "experience.collector.trajectory_collector",
     ["AsyncTrajectoryCollector"]),
    ("algorithms.async_utils.replay_buffer", "experience.collector.replay_buffer", ["ReplayBuffer"]),
    ("distributed.batched_data_dict", "experience.batched_data_dict", ["BatchedDataDict"]),
    ("data.interfaces", "experience.interfaces", ["DatumSpec", "LLMMessageLogType"]),
    ("environments.interfaces", "experience.environments.interfaces", ["EnvironmentInterface", "EnvironmentReturn"]),
    ("models.generation.interfaces", "experience.generation.interfaces",
     ["GenerationInterface", "GenerationConfig", "GenerationDatumSpec", "GenerationOutputSpec"]),
])
def test_nemo_rl_module_names_are_ours_under_our_package_name(nemo_rl_path: str, ours: str,
                                                               names: list[str]) -> None:
    alias, module = (importlib.import_module(f"nemo_gym.{path}") for path in (nemo_rl_path, ours))
    for name in names:
        assert getattr(alias, name) is getattr(module, name), name

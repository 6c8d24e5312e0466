"""A NeMo RL-style script, written against NeMo RL's import paths (`nemo_rl.*`), runs here with only the package name
changed: two multi-turn rollouts and the asynchronous collector feeding a trainer loop shaped like NeMo RL's
(`sample` polled until a step is complete, `prepare_for_refit` → `set_weight_version` → `resume_after_refit`,
`get_dataloader_state` saved beside the checkpoint).

It runs on a backend written against NeMo RL's GenerationInterface (tests/experience/nemo_rl_fakes.py) with the real
tokenizer and chat template; the real backends run the same paths in their own tests (test_rollouts_vllm.py,
test_collector_vllm.py), which are too slow to repeat here. The environment ends a sample after
`extra_env_info["turns"]` turns with 0.25 a turn.
"""

import re
from typing import Any, Callable

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.interfaces import PromptGroupRecord
from tests.experience.collector_fakes import no_thread_leak
from tests.experience.nemo_rl_fakes import NemoRLStyleGeneration
from tests.helpers.model import MODEL_DIR

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures(no_thread_leak.__name__)]

SCRIPT = '''
import asyncio
import time

from nemo_rl.algorithms.async_utils import AsyncTrajectoryCollector, ReplayBuffer
from nemo_rl.data.interfaces import DatumSpec
from nemo_rl.distributed.batched_data_dict import BatchedDataDict
from nemo_rl.environments.interfaces import EnvironmentInterface, EnvironmentReturn
from nemo_rl.experience.rollout_manager import RolloutManager
from nemo_rl.experience.rollouts import run_async_multi_turn_rollout, run_multi_turn_rollout
from nemo_rl.models.generation.interfaces import GenerationInterface

import torch


class CountdownEnvironment(EnvironmentInterface):
    def step(self, message_log_batch, metadata):
        seen = [state.get("seen", 0) + 1 for state in metadata]
        return EnvironmentReturn(
            observations=[{"role": "environment", "content": f"{n} turn(s) done"} for n in seen],
            metadata=[{**state, "seen": n} for state, n in zip(metadata, seen)],
            next_stop_strings=[None] * len(seen),
            rewards=torch.full((len(seen),), 0.25),
            terminateds=torch.tensor([n >= state["turns"] for state, n in zip(metadata, seen)]),
            answers=None,
        )


def datum(tokenizer, idx: int, turns: int) -> DatumSpec:
    text = tokenizer.apply_chat_template([{"role": "user", "content": f"Count down from {turns}."}],
                                         tokenize=False, add_generation_prompt=True)
    token_ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"][0]
    return {"message_log": [{"role": "user", "content": text, "token_ids": token_ids}],
            "extra_env_info": {"turns": turns}, "task_name": "countdown", "idx": idx, "loss_multiplier": 1.0}


def collate(data: list[DatumSpec]) -> BatchedDataDict:
    return BatchedDataDict({key: [d[key] for d in data] for key in data[0]})


def main(policy_generation: GenerationInterface, tokenizer, turns: list[int]) -> dict:
    task_to_env = {"countdown": CountdownEnvironment()}
    prompts = [datum(tokenizer, i, n) for i, n in enumerate(turns)]
    rollouts = {}
    for name, rollout in (("batched", run_multi_turn_rollout), ("async", run_async_multi_turn_rollout)):
        final_batch, rollout_metrics = rollout(policy_generation, collate(prompts), tokenizer, task_to_env,
                                               max_seq_len=2048, max_rollout_turns=3)
        rollouts[name] = (final_batch["total_reward"].tolist(), rollout_metrics["total_turns"])
    rollout_manager = RolloutManager(tokenizer=tokenizer, task_to_env=task_to_env, num_generations_per_prompt=2,
                                     max_seq_len=2048, max_rollout_turns=3, policy_generation=policy_generation)
    record = asyncio.run(rollout_manager.run_rollout(prompts[1]))
    rollouts["rollout_manager"] = ([c.reward for c in record.completions], record.rollout_metrics["total_turns"])

    master_config = {
        "grpo": {"num_prompts_per_step": 2, "num_generations_per_prompt": 2, "max_rollout_turns": 3,
                 "max_num_epochs": 1, "max_num_steps": 2, "val_period": 0,
                 "async_grpo": {"enabled": True, "max_trajectory_age_steps": 1, "in_flight_weight_updates": False}},
        "policy": {"model_name": "SmolLM2-135M-Instruct", "max_total_sequence_length": 2048,
                   "generation": {"max_new_tokens": 8}},
        "loss_fn": {"use_importance_sampling_correction": True},
    }
    num_prompts_per_step = master_config["grpo"]["num_prompts_per_step"]
    max_trajectory_age_steps = master_config["grpo"]["async_grpo"]["max_trajectory_age_steps"]
    replay_buffer = ReplayBuffer(max_size=num_prompts_per_step * (max_trajectory_age_steps + 1))
    trajectory_collector = AsyncTrajectoryCollector(
        policy_generation=policy_generation, tokenizer=tokenizer, task_to_env=task_to_env,
        master_config=master_config, replay_buffer=replay_buffer, start_step=0)
    dataloader = [collate(prompts[i:i + 2]) for i in range(0, len(prompts), 2)]
    trajectory_collector.start_collection(dataloader)
    weight_version = 0
    trajectory_collector.set_weight_version(weight_version)
    steps = []
    try:
        while not replay_buffer.has_complete_batch(0, num_prompts_per_step):
            time.sleep(0.01)
        for step in range(master_config["grpo"]["max_num_steps"]):
            while (sample_result := replay_buffer.sample(
                    num_prompt_groups=num_prompts_per_step, current_weight_version=weight_version,
                    max_age_steps=max_trajectory_age_steps)) is None:
                time.sleep(0.01)
            trajectories = sample_result["trajectories"]
            steps.append([(t.prompt_idx, [c.reward for c in t.completions]) for t in trajectories])
            trajectory_collector.prepare_for_refit()
            weight_version += 1
            trajectory_collector.set_weight_version(weight_version)
            trajectory_collector.resume_after_refit()
            dataloader_state = trajectory_collector.get_dataloader_state()
        return {"rollouts": rollouts, "steps": steps, "weight_version": trajectory_collector.get_weight_version(),
                "dataloader_state": dataloader_state, "buffer_size": replay_buffer.size()}
    finally:
        trajectory_collector.shutdown()
'''
TURNS = [1, 2, 1, 3]


def _nemo_gym_source() -> str:
    """The script with `nemo_rl` replaced by `nemo_gym` in its imports, and nothing else changed."""
    source = SCRIPT.replace("from nemo_rl.", "from nemo_gym.")
    assert "nemo_rl" not in source and len(re.findall(r"^from nemo_gym\.", source, re.M)) == 7
    return source


def test_a_nemo_rl_style_script_runs_rollouts_and_the_collector() -> None:
    namespace: dict[str, Any] = {"__name__": "nemo_rl_style_script"}
    exec(compile(_nemo_gym_source(), "nemo_rl_style_script.py", "exec"), namespace)
    main: Callable[..., dict[str, Any]] = namespace["main"]
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    reply = tokenizer.encode("Three, two, one.", add_special_tokens=False) + [tokenizer.eos_token_id]
    backend = NemoRLStyleGeneration(reply, max_new_tokens=8, pad_token_id=tokenizer.pad_token_id)

    result = main(backend, tokenizer, TURNS)

    rewards = [0.25 * n for n in TURNS]
    assert result["rollouts"] == {"batched": (rewards, sum(TURNS)), "async": (rewards, sum(TURNS)),
                                  "rollout_manager": ([0.5, 0.5], 4)}
    trained = sorted(idx for step in result["steps"] for idx, _ in step)
    assert trained == [0, 1, 2, 3]  # one epoch, 2 steps of 2 prompt groups
    for step in result["steps"]:
        for idx, group_rewards in step:
            assert group_rewards == [0.25 * TURNS[idx]] * 2
    assert result["weight_version"] == 2 and result["buffer_size"] == 0
    assert result["dataloader_state"] == {}  # a list has no cursor (test_collector_nemo_rl_compat.py: one that has)


def test_the_script_uses_only_nemo_rl_paths_that_exist_here() -> None:
    paths = re.findall(r"^from (nemo_rl\.[\w.]+) import", SCRIPT, re.M)
    assert sorted(paths) == sorted([
        "nemo_rl.algorithms.async_utils", "nemo_rl.data.interfaces", "nemo_rl.distributed.batched_data_dict",
        "nemo_rl.environments.interfaces", "nemo_rl.experience.rollout_manager", "nemo_rl.experience.rollouts",
        "nemo_rl.models.generation.interfaces"])
    assert PromptGroupRecord.__module__ == "nemo_gym.experience.interfaces"

"""A training loop on the asynchronous trajectory collector (shown in docs/trainers.md; tests run it against vLLM)."""
import argparse

from transformers import AutoTokenizer

from nemo_gym.experience.collector import AsyncTrajectoryCollector, ReplayBuffer, StatefulPromptLoader
from nemo_gym.experience.datasets import iter_jsonl_datums
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.errors import DataExhaustedError
from nemo_gym.experience.generation import VllmHttpGeneration


def main(vllm_url: str, rows: str, model: str = "models/SmolLM2-135M-Instruct") -> None:
    P, N, A = 4, 2, 1  # prompts per step, completions per prompt, max trajectory age (steps)
    config = {"grpo": {"num_prompts_per_step": P, "num_generations_per_prompt": N, "max_rollout_turns": 1,
                       "async_grpo": {"max_trajectory_age_steps": A, "max_epochs": 1}},
              "policy": {"max_total_sequence_length": 2048,
                         "generation": {"max_new_tokens": 32, "temperature": 1.0}}}
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = list(iter_jsonl_datums(rows, tokenizer, task_name="math"))
    policy = VllmHttpGeneration({"model_name": "SmolLM2-135M-Instruct", "max_seq_len": 2048,
                                 "pad_token_id": tokenizer.pad_token_id, **config["policy"]["generation"]}, vllm_url)
    with policy, MathEnvironment() as math_env:
        buffer = ReplayBuffer(max_size=P * (A + 1) * 2)
        collector = AsyncTrajectoryCollector(policy, tokenizer, {"math": math_env}, config, buffer)
        collector.start_collection(StatefulPromptLoader(prompts, batch_size=P, seed=0))
        step = 0
        try:
            while True:
                try:
                    batch = buffer.sample_blocking(P, step, A, timeout_s=600)  # P groups aimed at this step
                except DataExhaustedError:
                    break  # every prompt of the epoch was trained once
                rewards = [c.reward for group in batch["trajectories"] for c in group.completions]
                collector.prepare_for_refit()  # ... a real trainer computes advantages and updates weights here
                step += 1
                collector.set_weight_version(step)
                collector.resume_after_refit()
                print(f"step {step}: mean reward {sum(rewards) / len(rewards):.2f}, "
                      f"age {batch['avg_trajectory_age']:.1f}, {collector.get_metrics()['groups_generated']} groups")
        finally:
            collector.shutdown()


if __name__ == "__main__":  # required: MathEnvironment's verifier workers re-import this module
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--rows", default="nemo_gym/resources_servers/math/data/arithmetic_example.jsonl")
    args = parser.parse_args()
    main(args.vllm_url, args.rows)

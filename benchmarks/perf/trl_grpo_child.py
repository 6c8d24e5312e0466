"""TRL's GRPOTrainer on the rows, reward and settings benchmarks/perf/grpo_vs_trl.py gives it; runs in .venv-trl.

    .venv-trl/bin/python benchmarks/perf/trl_grpo_child.py --rows R.jsonl --held-out 30 --budget-s 600 \\
        --log steps.jsonl --out final_model [--prompts 4 --generations 8 --max-tokens 32 --lr 1e-5 ...]

Without a GPU TRL generates with transformers (use_vllm=False), as a user without one would. One optimizer step
per generation round of prompts x generations completions (micro-batches of --micro-batch-size, as the example
trainer's), no KL term, token-level loss over the whole batch (loss_type "dapo"), group-normalized advantages, clip
0.2, constant learning rate, gradient norm clipped at 1, float32; the tied embedding is frozen as in the example
trainer, so both train the same weights. The reward is nemo_gym's math verifier, loaded from its file (the rest of
nemo_gym is not installed here): 1.0 when the completion's answer matches, as MathEnvironment scores it.

The clock starts after the imports, before the model loads. Each step appends {"step", "elapsed_s", "reward"} to
--log; training stops after the first step that ends past --budget-s, and the trained model is saved to --out.
"""

import argparse
import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

REPO_ROOT = Path(__file__).resolve().parents[2]
VERIFIER = REPO_ROOT / "nemo_gym" / "resources_servers" / "math" / "verifier.py"


def load_verifier() -> ModuleType:
    """nemo_gym's math verifier module from its file: it imports only `re` and math_verify."""
    spec = importlib.util.spec_from_file_location("nemo_gym_math_verifier", VERIFIER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def math_reward(verifier: ModuleType) -> Any:
    def math_verifier(completions: list[list[dict[str, str]]], expected_answer: list[str],
                      **kwargs: Any) -> list[float]:
        rewards = []
        for completion, expected in zip(completions, expected_answer):
            answer = verifier.extract_answer(completion[-1]["content"])
            rewards.append(1.0 if answer is not None and verifier.answers_match(answer, expected) else 0.0)
        return rewards

    return math_verifier


def training_rows(path: Path, held_out: int) -> Dataset:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return Dataset.from_list([{"prompt": row["responses_create_params"]["input"],
                               "expected_answer": str(row["expected_answer"])} for row in rows[:-held_out]])


class WallClock(TrainerCallback):
    """Logs each step's mean reward with the seconds since `started`; stops once `budget_s` is spent."""

    def __init__(self, started: float, budget_s: float, log: Path) -> None:
        self.started, self.budget_s, self.log = started, budget_s, log

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and "reward" in logs:
            with open(self.log, "a") as handle:
                handle.write(json.dumps({"step": state.global_step - 1, "elapsed_s": time.perf_counter() - self.started,
                                         "reward": logs["reward"]}) + "\n")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if time.perf_counter() - self.started >= self.budget_s:
            control.should_training_stop = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO_ROOT / "models" / "SmolLM2-135M-Instruct")
    parser.add_argument("--rows", type=Path, required=True)
    parser.add_argument("--held-out", type=int, required=True, help="the last rows: never trained on")
    parser.add_argument("--budget-s", type=float, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    batch = args.prompts * args.generations
    if batch % args.micro_batch_size:
        parser.error(f"--micro-batch-size {args.micro_batch_size} must divide {batch} completions a step")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    if model.config.tie_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    config = GRPOConfig(
        output_dir=str(args.out.parent / "trl_output"), use_cpu=True, bf16=False, fp16=False, use_vllm=False,
        num_generations=args.generations, per_device_train_batch_size=args.micro_batch_size,
        gradient_accumulation_steps=batch // args.micro_batch_size, max_completion_length=args.max_tokens,
        temperature=args.temperature, learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.01, max_grad_norm=1.0, beta=0.0, epsilon=0.2, loss_type="dapo", scale_rewards="group",
        num_iterations=1, gradient_checkpointing=False, max_steps=100_000, logging_steps=1, save_strategy="no",
        report_to="none", disable_tqdm=True, seed=args.seed)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=math_reward(load_verifier()),
                          args=config, train_dataset=training_rows(args.rows, args.held_out),
                          callbacks=[WallClock(started, args.budget_s, args.log)])
    trainer.train()
    model.save_pretrained(args.out)


if __name__ == "__main__":
    main()

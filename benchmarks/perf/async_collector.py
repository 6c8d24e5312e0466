"""Asynchronous vs synchronous RL on the real vLLM (CPU build, SmolLM2-135M-Instruct), as ratios from one run.

    .venv/bin/python -m benchmarks.perf.async_collector [--steps 16] [--prompts 8] [--generations 4] [--vllm-url URL]

A simulated trainer runs `--steps` steps. Each step needs `--prompts` prompt groups of `--generations` completions
(arithmetic prompts sampled at temperature 1, math environment) and then trains for T seconds, T being the mean time
to generate one step's groups, measured first: generation and training take equal time, so the ideal overlap is 2x
(2S/(S+1) over S steps: the first step's generation has nothing to overlap with).
- sync: generate the step's groups (RolloutManager, all groups at once), then train;
- async, max age 1 and 2: AsyncTrajectoryCollector generates ahead (in-flight weight updates, as vLLM's async
  engine allows) while the trainer samples its step's groups, trains and refits (prepare_for_refit ->
  set_weight_version -> resume_after_refit).
Reported: wall-clock speedup over sync (goal >= 1.8x), and the share of vLLM's time with no request running (from
50 ms polls of its /metrics). Writes benchmarks/results/async_collector.json.
"""

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from benchmarks.perf.experience import math_datums
from benchmarks.perf.results import Recorder, load_average, recording
from benchmarks.perf.vllm_server import MODEL_DIR, MODEL_NAME, IdleMonitor, vllm_server
from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate

MAX_SEQ_LEN = 2048
# The first checks import sympy in the verifier workers; on a loaded shared machine that alone can pass 30 s.
VERIFY_TIMEOUT_S = 300.0


def generate_step(manager: RolloutManager, prompts: list[dict[str, Any]]) -> float:
    started = time.perf_counter()

    async def all_groups() -> None:
        await asyncio.gather(*(manager.run_rollout(p) for p in prompts))

    asyncio.run(all_groups())
    return time.perf_counter() - started


def sync_run(manager: RolloutManager, batches: list[list[dict[str, Any]]], train_s: float,
             base_url: str) -> dict[str, Any]:
    with IdleMonitor(base_url).watching() as monitor:
        started = time.perf_counter()
        for batch in batches:
            generate_step(manager, batch)
            time.sleep(train_s)
        seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "vllm_idle_fraction": monitor.idle_fraction, "load_average": load_average()}


def async_run(manager: RolloutManager, tokenizer: Any, envs: dict[str, Any], datums: list[dict[str, Any]],
              args: argparse.Namespace, max_age: int, train_s: float, base_url: str) -> dict[str, Any]:
    config = {
        "grpo": {"num_prompts_per_step": args.prompts, "num_generations_per_prompt": args.generations,
                 "max_rollout_turns": 1,
                 "async_grpo": {"max_trajectory_age_steps": max_age, "in_flight_weight_updates": True}},
        "policy": {"max_total_sequence_length": MAX_SEQ_LEN, "generation": {}},
    }
    buffer = ReplayBuffer(max_size=args.prompts * (max_age + 1) * 2)
    collector = AsyncTrajectoryCollector(manager.impl.policy_generation, tokenizer, envs, config, buffer,
                                         rollout_manager=manager)
    ages = []
    with IdleMonitor(base_url).watching() as monitor:
        started = time.perf_counter()
        collector.start_collection(StatefulPromptLoader(datums, batch_size=args.prompts, seed=1))
        try:
            for step in range(args.steps):
                sampled = buffer.sample_blocking(args.prompts, step, max_age, timeout_s=900)
                ages.append(sampled["avg_trajectory_age"])
                time.sleep(train_s)
                collector.prepare_for_refit()
                collector.set_weight_version(step + 1)
                collector.resume_after_refit()
            seconds = time.perf_counter() - started
            metrics = collector.get_metrics()
        finally:
            collector.shutdown()
    return {"seconds": round(seconds, 2), "vllm_idle_fraction": monitor.idle_fraction,
            "mean_sampled_age": round(statistics.mean(ages), 2), "max_age": max_age,
            "groups_generated": metrics["groups_generated"], "groups_evicted": metrics["groups_evicted"],
            "trainer_wait_s_total": round(metrics["trainer_wait_s_total"], 2), "load_average": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=8, help="prompt groups per step")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--vllm-url", help="a vLLM already serving the bundled model (default: start one)")
    parser.add_argument("--quick", action="store_true", help="6 steps of 4 prompts")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.prompts = 6, 4
    with recording("async_collector", args.quick) as recorder:
        measure(args, recorder)


def measure(args: argparse.Namespace, recorder: Recorder) -> None:
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    datums = math_datums(ChatTemplate(tokenizer), args.prompts * (args.steps + 4))
    sampled = {"model_name": MODEL_NAME, "max_new_tokens": args.max_tokens, "max_seq_len": MAX_SEQ_LEN,
               "pad_token_id": tokenizer.pad_token_id, "temperature": 1.0}
    with tempfile.TemporaryDirectory(prefix="ng_async_bench_") as tmp, \
            vllm_server(Path(tmp), args.vllm_url) as base_url, \
            VllmHttpGeneration(sampled, base_url) as backend, \
            MathEnvironment(verify_timeout_s=VERIFY_TIMEOUT_S) as math_env:
        envs = {"math": math_env}
        manager = RolloutManager(tokenizer, envs, args.generations, MAX_SEQ_LEN, 1, backend)
        batches = [datums[i * args.prompts:(i + 1) * args.prompts] for i in range(args.steps)]
        generate_step(manager, batches[0])  # warm-up: vLLM and the verifier workers
        train_s = statistics.mean(generate_step(manager, batch) for batch in batches[1:4])
        print(f"one step's generation: {train_s:.1f} s (= the simulated training step)", flush=True)
        runs = {"sync": sync_run(manager, batches, train_s, base_url)}
        print(f"sync: {runs['sync']}", flush=True)
        for max_age in (1, 2):
            runs[f"async_age_{max_age}"] = async_run(manager, tokenizer, envs, datums, args, max_age, train_s,
                                                      base_url)
            print(f"async, max age {max_age}: {runs[f'async_age_{max_age}']}", flush=True)
    speedups = {name: round(runs["sync"]["seconds"] / run["seconds"], 3) for name, run in runs.items()
                if name != "sync"}
    ideal = round(2 * args.steps / (args.steps + 1), 3)
    print(f"speedup over sync: {speedups} (ideal {ideal}x over {args.steps} steps, goal >= 1.8x); "
          f"vLLM idle: { {name: run['vllm_idle_fraction'] for name, run in runs.items()} }")
    recorder.write({"speedup_over_sync": speedups, "ideal_speedup": ideal}, {
        "settings": {"steps": args.steps, "prompts_per_step": args.prompts, "generations_per_prompt": args.generations,
                     "max_new_tokens": args.max_tokens, "train_step_s": round(train_s, 2),
                     "in_flight_weight_updates": True},
        "runs": runs})

if __name__ == "__main__":
    main()

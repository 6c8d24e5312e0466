"""The example GRPO trainer against TRL's GRPOTrainer: same model, rows, reward, settings and wall-clock budget.

    python -m benchmarks.perf.grpo_vs_trl [--budget-s 900] [--quick] [--render]

Both train the bundled SmolLM2-135M-Instruct, float32 on CPU, on the one-digit sums of grpo_learning (its 70
training rows, prompt and split; the 30 held-out rows are never trained on), rewarded 1 by nemo_gym's math verifier
(the functions MathEnvironment calls), with the same prompts per step, group size, max new tokens, learning rate,
temperature and micro-batch size, no KL term, a token-level clipped loss and the tied embedding frozen. Ours first:
examples.grpo.train's run(), weights pushed into vLLM every step, synchronous by default (generate, train, push, as
TRL does: on cores that vLLM and the trainer share, generating ahead only slows training down by as much as it
saves; `--mode async` runs vLLM ahead with max trajectory age 1), then TRL 1.13 in its own virtualenv (.venv-trl,
made by benchmarks/setup_trl.sh, which this runs first), generating with transformers as it does without a GPU.
Each side stops after the first step that ends past --budget-s on its own clock:
- ours starts at run(): model load, vLLM's cold start, the version-0 weight push, then the steps (waiting for
  generation, training, pushing weights);
- TRL's starts after its imports: model load, trainer set-up, then the steps (generation, scoring, training).
Then one evaluator scores the bundled weights and each side's final weights alike: transformers in this process
(HFGeneration, one seed for all three) through the math environment, greedy and sampled over the held-out rows.

The ratio: TRL's final reward is the mean training reward of its last WINDOW steps; each side reaches it at the end
of the first step where its mean over the last WINDOW steps is at least that; reported is ours' time over TRL's
(goal <= 0.5). Writes benchmarks/results/grpo_vs_trl.json and docs/img/grpo_vs_trl.png; `--render` redraws the PNG.
"""

import argparse
import asyncio
import json
import subprocess
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from transformers import AutoTokenizer

from benchmarks.perf.grpo_learning import HELD_OUT, add_step_arguments, arithmetic_rows
from benchmarks.perf.lifecycle import run_child
from benchmarks.perf.plots import pyplot, save
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, Recorder, load_average, recording, results_path
from examples.grpo.train import MAX_SEQ_LEN, VERIFY_TIMEOUT_S, GRPOConfig, load_datums, mean_reward, run
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.generation.hf import HFGeneration
from nemo_gym.experience.interfaces import DatumSpec
from nemo_gym.experience.rollout_manager import RolloutManager

FIGURE = REPO_ROOT / "docs" / "img" / "grpo_vs_trl.png"
MODEL = REPO_ROOT / "models" / "SmolLM2-135M-Instruct"
TRL_PYTHON = REPO_ROOT / ".venv-trl" / "bin" / "python"
WINDOW = 3  # training steps averaged into "the reward reached": one batch's reward is noisy
SIDES = {"ours": ("example GRPO trainer (vLLM)", "tab:blue"), "trl": ("TRL GRPOTrainer (transformers)", "tab:red")}


def trailing_means(rewards: list[float], window: int) -> list[float]:
    return [sum(rewards[max(0, i + 1 - window):i + 1]) / len(rewards[max(0, i + 1 - window):i + 1])
            for i in range(len(rewards))]


def time_to_reach(steps: list[dict[str, Any]], target: float, window: int) -> Optional[float]:
    """Seconds at the end of the first step whose trailing mean reward reaches `target`; None if none does."""
    means = trailing_means([s["reward"] for s in steps], window)
    return next((s["elapsed_s"] for s, mean in zip(steps, means) if mean >= target), None)


def reach(ours: list[dict[str, Any]], trl: list[dict[str, Any]], window: int = WINDOW) -> dict[str, Any]:
    """When each side first reaches TRL's final training reward, and ours' time over TRL's."""
    if not ours or not trl:
        raise BenchmarkFailed(f"no training steps: ours {len(ours)}, TRL {len(trl)}")
    window = min(window, len(trl))
    target = trailing_means([s["reward"] for s in trl], window)[-1]
    ours_s, trl_s = time_to_reach(ours, target, window), time_to_reach(trl, target, window)
    return {"trl_final_reward": round(target, 4), "window_steps": window,
            "ours_s": None if ours_s is None else round(ours_s, 1), "trl_s": round(trl_s, 1),
            "trl_end_s": round(trl[-1]["elapsed_s"], 1),
            "ours_over_trl": None if ours_s is None else round(ours_s / trl_s, 3),
            "ours_over_trl_end": None if ours_s is None else round(ours_s / trl[-1]["elapsed_s"], 3)}


def held_out_rewards(weights: Optional[Path], tokenizer: Any, datums: list[DatumSpec],
                     args: argparse.Namespace) -> dict[str, float]:
    """The one evaluator: greedy and `eval_samples` sampled answers per held-out row, scored by MathEnvironment, on
    the bundled model with `weights` (a trained folder) copied in, so only the weights differ between sides."""
    config = {"max_new_tokens": args.max_tokens, "max_seq_len": MAX_SEQ_LEN, "temperature": args.temperature}
    with HFGeneration(config, MODEL, tokenizer, seed=args.seed) as policy, \
            MathEnvironment(verify_timeout_s=VERIFY_TIMEOUT_S) as env:
        if weights is not None:
            policy.update_weights(weights, 1)

        def score(generations: int, greedy: bool) -> float:
            manager = RolloutManager(tokenizer, {"math": env}, generations, MAX_SEQ_LEN, 1,
                                     policy_generation=policy, greedy=greedy)
            return round(mean_reward(manager, datums), 4)

        return {"greedy": score(1, True), "sampled": score(args.eval_samples, False)}


def run_ours(args: argparse.Namespace, rows: Path, out: Path) -> tuple[list[dict[str, Any]], Path]:
    config = GRPOConfig(task="math", rows=rows, eval_rows=HELD_OUT, steps=100_000, prompts_per_step=args.prompts,
                        generations_per_prompt=args.generations, max_new_tokens=args.max_tokens,
                        temperature=args.temperature, learning_rate=args.lr, micro_batch_size=args.micro_batch_size,
                        seed=args.seed, out_dir=out, wandb=False, max_wall_s=args.budget_s, evaluate=False,
                        synchronous=args.mode == "synchronous")
    result = run(config)
    return [asdict(r) for r in result.records], result.weights


def run_trl(args: argparse.Namespace, rows: Path, out: Path) -> tuple[list[dict[str, Any]], Path]:
    log, model = out / "steps.jsonl", out / "model"
    out.mkdir(parents=True)
    command = [str(TRL_PYTHON), str(REPO_ROOT / "benchmarks" / "perf" / "trl_grpo_child.py"), "--model", str(MODEL),
               "--rows", str(rows), "--held-out", str(HELD_OUT), "--budget-s", str(args.budget_s), "--log", str(log),
               "--out", str(model), "--prompts", str(args.prompts), "--generations", str(args.generations),
               "--max-tokens", str(args.max_tokens), "--lr", str(args.lr), "--temperature", str(args.temperature),
               "--micro-batch-size", str(args.micro_batch_size), "--seed", str(args.seed)]
    # The budget, plus a generous allowance for set-up and the last step on a loaded machine.
    done = run_child(command, timeout_s=args.budget_s + 1800, merge_stderr=True, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise BenchmarkFailed(f"TRL exited with {done.returncode}: {done.stdout[-3000:]}")
    return [json.loads(line) for line in log.read_text().splitlines()], model


def measure(args: argparse.Namespace, recorder: Recorder) -> None:
    subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "setup_trl.sh")], check=True)
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    with tempfile.TemporaryDirectory(prefix="ng_grpo_vs_trl_") as tmp:
        rows = Path(tmp) / "arithmetic.jsonl"
        arithmetic_rows(rows)
        load_at = {"start": load_average()}
        ours, ours_weights = run_ours(args, rows, Path(tmp) / "ours")
        load_at["between"] = load_average()
        trl, trl_weights = run_trl(args, rows, Path(tmp) / "trl")
        load_at["end_of_training"] = load_average()
        _, datums = load_datums(GRPOConfig(task="math", rows=rows, eval_rows=HELD_OUT), tokenizer)
        held_out = {"start": held_out_rewards(None, tokenizer, datums, args),
                    "ours": held_out_rewards(ours_weights, tokenizer, datums, args),
                    "trl": held_out_rewards(trl_weights, tokenizer, datums, args)}
    reached = reach(ours, trl)
    print(f"TRL's final reward {reached['trl_final_reward']}: ours at {reached['ours_s']} s, TRL at "
          f"{reached['trl_s']} s, ratio {reached['ours_over_trl']} (goal <= 0.5); held-out {held_out}", flush=True)
    figures = {
        "settings": {"budget_s": args.budget_s, "ours_mode": args.mode, "prompts_per_step": args.prompts,
                     "generations_per_prompt": args.generations, "max_new_tokens": args.max_tokens,
                     "learning_rate": args.lr, "temperature": args.temperature,
                     "micro_batch_size": args.micro_batch_size, "seed": args.seed, "training_rows": 100 - HELD_OUT,
                     "held_out_rows": HELD_OUT, "held_out_samples_per_row": args.eval_samples,
                     "model": "SmolLM2-135M-Instruct, float32", "trl": "1.13.0, transformers generation"},
        "clocks": {"ours": "from run(): model load, vLLM cold start, version-0 weight push, then the steps "
                           "(waiting for vLLM's generations, training, writing and loading the weights)",
                   "trl": "from after the imports: model load, trainer set-up, then the steps (generation with "
                          "transformers, scoring, training)"},
        "reach": reached,
        "held_out": held_out,
        "ours": {"steps": ours},
        "trl": {"steps": trl},
        "load_average": load_at,
        "load_average_at_end": load_average(),
    }
    path = recorder.write({"time_to_trl_final_reward_ours_over_trl": reached["ours_over_trl"]}, figures)
    if not args.quick:
        render(json.loads(path.read_text()), FIGURE)
        print(f"wrote {FIGURE}", flush=True)


def render(results: dict[str, Any], png: Path) -> None:
    """Both training-reward curves and both held-out rewards (start and end) against wall time, one PNG."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(10, 4.8))
    start, reached = results["held_out"]["start"], results["reach"]
    for side, (label, color) in SIDES.items():
        steps = results[side]["steps"]
        x = [s["elapsed_s"] for s in steps]
        ax.plot(x, [s["reward"] for s in steps], color=color, marker="o", markersize=3, alpha=0.4,
                label=f"{label}: training batch reward")
        ax.plot(x, trailing_means([s["reward"] for s in steps], reached["window_steps"]), color=color,
                label=f"{label}: mean of the last {reached['window_steps']} steps")
        end = results["held_out"][side]
        for key, marker in (("greedy", "s"), ("sampled", "^")):
            ax.plot([0, x[-1]], [start[key], end[key]], color=color, linestyle="--", marker=marker,
                    label=f"{label}: held-out {key}, start / end")
    ax.axhline(reached["trl_final_reward"], color="gray", linestyle=":", label="TRL's final training reward")
    title = f"ours reaches TRL's final training reward in {reached['ours_over_trl']}x TRL's time"
    if reached["ours_over_trl"] is None:
        title = "ours does not reach TRL's final training reward"
    s = results["settings"]
    ax.set_title(f"SmolLM2-135M, one-digit sums, {s['prompts_per_step']} prompts x {s['generations_per_prompt']}, "
                 f"{s['budget_s']:.0f} s budget each\n{title}", fontsize=9)
    ax.set_xlabel("wall time since the trainer started (s)")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7)
    ax.grid(alpha=0.3)
    save(fig, png)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget-s", type=float, default=900.0, help="wall-clock budget of each side (seconds)")
    add_step_arguments(parser)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--eval-samples", type=int, default=4, help="sampled answers per held-out row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=["synchronous", "async"], default="synchronous", help="how ours trains")
    parser.add_argument("--quick", action="store_true", help="one step each of 2 prompts x 4, results under quick/")
    parser.add_argument("--render", action="store_true", help="only redraw the PNG from the results file")
    args = parser.parse_args()
    if args.render:
        render(json.loads(results_path("grpo_vs_trl").read_text()), FIGURE)
        return
    if args.quick:
        args.budget_s, args.prompts, args.generations, args.micro_batch_size, args.eval_samples = 1.0, 2, 4, 4, 1
    with recording("grpo_vs_trl", args.quick) as recorder:
        measure(args, recorder)


if __name__ == "__main__":  # required: the math verifier's worker processes re-import this module
    main()

"""Does training stay sound off-policy? The example GRPO trainer at max trajectory age 0 (synchronous), and 1 and 2
each with and without truncated importance sampling, float32 on both sides, on the same rows and one vLLM.

    python -m benchmarks.perf.grpo_off_policy [--steps 16] [--ages 0,1,2] [--quick] [--render]

Every run trains the bundled SmolLM2-135M-Instruct from its own weights (each run pushes them as version 0) on the 70
one-digit sums of grpo_learning: age 0 is synchronous GRPO (each step's groups generated on the weights just pushed),
ages 1 and 2 the asynchronous collector generating up to that many weight versions ahead. A
second run at age 0 with another seed (another prompt order and other samples) measures the noise between two
runs that differ by chance alone. Reported per run: the training reward per step, its mean over all steps and over
the last 4, the batches' mean age, the mean importance weight, and seconds per step; and each run's distance from
the age-0 curve (mean absolute difference of the 3-step trailing means), next to the noise distance. NeMo RL's
published result, which this checks at small scale: with the correction, asynchronous GRPO up to a few steps of age
follows the synchronous curve per step. Writes benchmarks/results/grpo_off_policy.json and
docs/img/grpo_off_policy.png (`--render` redraws it).
"""

import argparse
import json
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.perf.grpo_learning import HELD_OUT, add_step_arguments, arithmetic_rows
from benchmarks.perf.grpo_vs_trl import trailing_means
from benchmarks.perf.plots import pyplot, save
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, Recorder, load_average, recording, results_path
from examples.grpo.servers import vllm_server
from examples.grpo.train import TRAINER_DTYPE, GRPOConfig, run

FIGURE = REPO_ROOT / "docs" / "img" / "grpo_off_policy.png"
MODEL = REPO_ROOT / "models" / "SmolLM2-135M-Instruct"
WINDOW = 3  # steps in a trailing mean: one batch's reward is noisy
LAST = 4  # steps averaged into "the reward at the end"
BASELINE, NOISE = "age0_off", "age0_off_seed1"


def run_name(age: int, corrected: bool) -> str:
    return f"age{age}_{'on' if corrected else 'off'}"


def curve_distance(a: list[float], b: list[float]) -> float:
    """Mean absolute difference of two reward curves' trailing means, over the steps both ran."""
    n = min(len(a), len(b))
    return statistics.mean(abs(x - y) for x, y in zip(trailing_means(a[:n], WINDOW), trailing_means(b[:n], WINDOW)))


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    rewards = [r["reward"] for r in records]
    step_s = [r["wait_s"] + r["train_s"] + r["refit_wait_s"] + r["push_s"] for r in records]
    return {"mean_reward": round(statistics.mean(rewards), 4),
            "final_reward": round(statistics.mean(rewards[-LAST:]), 4),
            "mean_age": round(statistics.mean(r["trajectory_age"] for r in records), 3),
            "mean_importance_weight": round(statistics.mean(r["importance_weight_mean"] for r in records), 4),
            "mean_truncated_fraction": round(statistics.mean(r["importance_truncated_fraction"] for r in records), 5),
            "mean_clipped_fraction": round(statistics.mean(r["clipped_fraction"] for r in records), 5),
            "mean_step_s": round(statistics.mean(step_s), 2),
            "elapsed_s": round(records[-1]["elapsed_s"], 1)}


def measure(args: argparse.Namespace, recorder: Recorder) -> None:
    # At age 0 the weights that generated are the ones trained (float32 both sides): every importance weight is 1, so
    # the correction changes nothing there and age 0 runs without it.
    plan = [(age, corrected, args.seed) for age in args.ages for corrected in (False, True) if age or not corrected]
    plan.append((0, False, args.seed + 1))
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="ng_grpo_off_policy_") as tmp:
        rows = Path(tmp) / "arithmetic.jsonl"
        arithmetic_rows(rows)
        # One vLLM for every run: each run pushes the bundled weights as version 0 before its first step.
        with vllm_server(MODEL, Path(tmp) / "vllm.log", TRAINER_DTYPE) as url:
            for age, corrected, seed in plan:
                name = run_name(age, corrected) + ("" if seed == args.seed else f"_seed{seed - args.seed}")
                config = GRPOConfig(task="math", rows=rows, eval_rows=HELD_OUT, steps=args.steps,
                                    prompts_per_step=args.prompts, generations_per_prompt=args.generations,
                                    max_new_tokens=args.max_tokens, learning_rate=args.lr,
                                    max_trajectory_age=max(age, 1), synchronous=age == 0,
                                    importance_sampling=corrected, seed=seed, vllm_url=url,
                                    out_dir=Path(tmp) / name, wandb=False, evaluate=False)
                print(f"--- {name}: max age {age}, correction {'on' if corrected else 'off'}, seed {seed}", flush=True)
                records = [asdict(r) for r in run(config).records]
                if len(records) != args.steps:
                    raise BenchmarkFailed(f"{name}: {len(records)} of {args.steps} steps ran")
                runs[name] = {"age": age, "importance_sampling": corrected, "seed": seed,
                              "summary": summarize(records), "steps": records, "load_average_after": load_average()}
    curves = {name: [s["reward"] for s in run_["steps"]] for name, run_ in runs.items()}
    noise = curve_distance(curves[BASELINE], curves[NOISE])
    distances = {name: round(curve_distance(curve, curves[BASELINE]), 4) for name, curve in curves.items()
                 if name not in (BASELINE, NOISE)}
    for name, distance in distances.items():
        print(f"{name}: distance from age 0 {distance:.4f} (noise {noise:.4f}); {runs[name]['summary']}", flush=True)
    figures = {
        "settings": {"steps": args.steps, "ages": args.ages, "prompts_per_step": args.prompts,
                     "generations_per_prompt": args.generations, "max_new_tokens": args.max_tokens,
                     "learning_rate": args.lr, "seed": args.seed,
                     "importance_sampling_cap": GRPOConfig().importance_sampling_cap,
                     "trailing_window": WINDOW, "final_steps": LAST, "training_rows": 100 - HELD_OUT,
                     "model": f"SmolLM2-135M-Instruct, {TRAINER_DTYPE} trainer and generator"},
        "noise_distance": round(noise, 4),
        "distance_from_age0": distances,
        "runs": runs,
    }
    ratios = {"distance_from_age0_over_noise": {name: round(d / noise, 3) if noise else None
                                                for name, d in distances.items()}}
    path = recorder.write(ratios, figures)
    if not args.quick:
        render(json.loads(path.read_text()), FIGURE)
        print(f"wrote {FIGURE}", flush=True)


def render(results: dict[str, Any], png: Path) -> None:
    """Each run's trailing-mean training reward per step, one panel per max age, the age-0 runs on every panel."""
    plt = pyplot()

    runs, ages = results["runs"], results["settings"]["ages"]
    fig, axes = plt.subplots(1, len(ages), figsize=(4.2 * len(ages), 3.8), sharey=True, squeeze=False)
    for ax, age in zip(axes[0], ages):
        for name, run_ in runs.items():
            if run_["age"] not in (0, age):
                continue
            rewards = [s["reward"] for s in run_["steps"]]
            style = "-" if run_["importance_sampling"] else "--"
            color = "gray" if run_["age"] == 0 and age != 0 else ("tab:blue" if run_["importance_sampling"]
                                                                  else "tab:orange")
            if name == NOISE:
                color = "silver"
            ax.plot(range(len(rewards)), trailing_means(rewards, WINDOW), linestyle=style, color=color,
                    label=name.replace("_", " "))
        ax.set_title(f"max trajectory age {age}", fontsize=9)
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel(f"training reward, mean of last {WINDOW} steps")
    axes[0][0].set_ylim(-0.02, 1.02)
    fig.suptitle("SmolLM2-135M, one-digit sums: with (solid) and without (dashed) truncated importance sampling",
                 fontsize=9)
    save(fig, png)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--ages", type=lambda text: [int(a) for a in text.split(",")], default=[0, 1, 2])
    add_step_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2 steps of 2 prompts x 4 at ages 0 and 1, under quick/")
    parser.add_argument("--render", action="store_true", help="only redraw the PNG from the results file")
    args = parser.parse_args()
    if args.render:
        render(json.loads(results_path("grpo_off_policy").read_text()), FIGURE)
        return
    if args.quick:
        args.steps, args.prompts, args.generations, args.ages = 2, 2, 4, [0, 1]
    with recording("grpo_off_policy", args.quick) as recorder:
        measure(args, recorder)


if __name__ == "__main__":  # required: the math verifier's worker processes re-import this module
    main()

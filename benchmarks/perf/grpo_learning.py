"""Does GRPO learn here? The example trainer (examples/grpo) on held-out arithmetic, before and after N steps.

    python -m benchmarks.perf.grpo_learning [--steps 16] [--lr 1e-5] [--vllm-url URL] [--quick]

The bundled SmolLM2-135M-Instruct, float32 on CPU, trained with the example GRPO trainer (asynchronous collector,
max trajectory age 1, clipped token-level loss, AdamW, weights pushed into vLLM after every step) on one-digit
sums: the 100 pairs (a, b) are split once into training rows and held-out rows, so no held-out sum is ever trained
on. Held-out mean reward is measured before and after, greedily and sampled at temperature 1 (the policy that is
trained). Reported: both rewards before and after (goal +0.15), the reward curve (docs/img/grpo_learning.png), and
the cost of a weight push (write + load into vLLM) in seconds and as a share of a step (goal <= 10%).
Writes benchmarks/results/grpo_learning.json; `--render` redraws the PNG from it.

A given --vllm-url must serve the bundled model with VLLM_SERVER_DEV_MODE=1; the run changes its weights (and
pushes the bundled ones back at the start of any later run of the trainer, which starts from them).
"""

import argparse
import json
import random
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.perf.plots import pyplot, save
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, Recorder, load_average, recording, results_path
from examples.grpo.train import GRPOConfig, run
from nemo_gym.resources_servers.math.generate_arithmetic import MAX_OUTPUT_TOKENS, PROMPT

FIGURE = REPO_ROOT / "docs" / "img" / "grpo_learning.png"
HELD_OUT = 30  # of the 100 one-digit pairs
SPLIT_SEED = 0


def arithmetic_rows(path: Path) -> None:
    """All 100 one-digit sums, shuffled once: the last HELD_OUT are the held-out rows (the trainer's --eval-rows)."""
    pairs = [(a, b) for a in range(10) for b in range(10)]
    random.Random(SPLIT_SEED).shuffle(pairs)
    with open(path, "w") as handle:
        for i, (a, b) in enumerate(pairs):
            handle.write(json.dumps({"responses_create_params": {
                "input": [{"role": "user", "content": PROMPT.format(a=a, b=b)}],
                "max_output_tokens": MAX_OUTPUT_TOKENS}, "expected_answer": str(a + b), "id": i}) + "\n")


def render(results: dict[str, Any], png: Path) -> None:
    """The per-step training reward (sampled) with held-out rewards before and after, from a results file."""
    plt = pyplot()

    steps = results["steps"]
    x = [s["step"] for s in steps]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, [s["reward"] for s in steps], marker="o", label="training batch reward (temperature 1)")
    last = x[-1] + 1 if x else 1
    for key, style, label in (("sampled", "tab:orange", "held-out, temperature 1"),
                              ("greedy", "tab:green", "held-out, greedy")):
        ax.plot([0, last], [results["held_out"][key]["before"], results["held_out"][key]["after"]],
                color=style, linestyle="--", marker="s", label=f"{label}: before / after")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"SmolLM2-135M, one-digit sums, {len(steps)} steps of {results['settings']['prompts_per_step']} "
                 f"prompts x {results['settings']['generations_per_prompt']}")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    save(fig, png)


def measure(args: argparse.Namespace, recorder: Recorder) -> None:
    with tempfile.TemporaryDirectory(prefix="ng_grpo_bench_") as tmp:
        rows = Path(tmp) / "arithmetic.jsonl"
        arithmetic_rows(rows)
        config = GRPOConfig(task="math", rows=rows, eval_rows=HELD_OUT, steps=args.steps,
                            prompts_per_step=args.prompts, generations_per_prompt=args.generations,
                            max_new_tokens=args.max_tokens, learning_rate=args.lr, eval_samples=args.eval_samples,
                            vllm_url=args.vllm_url, out_dir=Path(tmp) / "run", wandb=False)
        result = run(config)
    records = [asdict(r) for r in result.records]
    if len(records) != args.steps:
        raise BenchmarkFailed(f"{len(records)} of {args.steps} steps ran")
    step_s = [r["wait_s"] + r["train_s"] + r["refit_wait_s"] + r["push_s"] for r in records]
    push_s = [r["push_s"] for r in records]
    held_out = {"greedy": {"before": result.eval_before, "after": result.eval_after},
                "sampled": {"before": result.eval_sampled_before, "after": result.eval_sampled_after}}
    gains = {key: round(v["after"] - v["before"], 3) for key, v in held_out.items()}
    push_share = statistics.mean(p / s for p, s in zip(push_s, step_s))
    print(f"held-out reward gain: {gains} (goal +0.15); weight push {statistics.mean(push_s):.2f} s, "
          f"{push_share:.1%} of a step (goal <= 10%)", flush=True)
    figures = {
        "settings": {"steps": args.steps, "prompts_per_step": args.prompts, "generations_per_prompt": args.generations,
                     "max_new_tokens": args.max_tokens, "learning_rate": args.lr, "max_trajectory_age": 1,
                     "held_out_rows": HELD_OUT, "training_rows": 100 - HELD_OUT,
                     "held_out_samples_per_row": args.eval_samples, "model": "SmolLM2-135M-Instruct, float32"},
        "held_out": held_out,
        "weight_push": {"mean_s": round(statistics.mean(push_s), 2), "max_s": round(max(push_s), 2),
                        "mean_step_s": round(statistics.mean(step_s), 2), "share_of_step": round(push_share, 4)},
        "steps": records,
        "load_average_at_end": load_average(),
    }
    path = recorder.write({"held_out_reward_gain": gains, "weight_push_share_of_step": round(push_share, 4)},
                          figures)
    if not args.quick:
        render(json.loads(path.read_text()), FIGURE)
        print(f"wrote {FIGURE}", flush=True)


def add_step_arguments(parser: argparse.ArgumentParser) -> None:
    """What one GRPO step is, the same for every GRPO benchmark: prompt groups, group size, tokens, learning rate."""
    parser.add_argument("--prompts", type=int, default=4, help="prompt groups per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (the GRPO group)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=16)
    add_step_arguments(parser)
    parser.add_argument("--eval-samples", type=int, default=4, help="sampled answers per held-out row")
    parser.add_argument("--vllm-url", help="a vLLM in dev mode serving the bundled model (default: start one)")
    parser.add_argument("--quick", action="store_true", help="2 steps of 2 prompts x 4, results under quick/")
    parser.add_argument("--render", action="store_true", help="only redraw the PNG from the results file")
    args = parser.parse_args()
    if args.render:
        render(json.loads(results_path("grpo_learning").read_text()), FIGURE)
        return
    if args.quick:
        args.steps, args.prompts, args.generations, args.eval_samples = 2, 2, 4, 1
    with recording("grpo_learning", args.quick) as recorder:
        measure(args, recorder)


if __name__ == "__main__":  # required: the math verifier's worker processes re-import this module
    main()

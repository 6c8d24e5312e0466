"""Asynchronous vs synchronous GRPO with real training and real weight pushes, generation and training on cores of
their own (NeMo RL's non-colocated layout), as ratios from one run.

    python -m benchmarks.perf.grpo_async_vs_sync [--steps 6] [--quick]

The example trainer (examples/grpo) on one-digit sums, settings as grpo_learning's (4 prompts x 8 completions a
step, 32 new tokens, lr 1e-5), runs three times, each in a process of its own against a vLLM this benchmark starts:
- async_pinned: the collector generates ahead on weights at most 1 version old (max trajectory age 1);
- sync_pinned: `--synchronous`: generate the step's groups on the weights just pushed, then train, then push;
- sync_shared: the same, without the layout: no taskset, vLLM's compute threads bound to every core and torch with
  one thread per core, so each phase may use the whole machine while the other waits.
Pinned: vLLM under `taskset -c 0` with VLLM_CPU_OMP_THREADS_BIND=0 (its compute threads on core 0), the trainer under
`taskset -c 1` with OMP_NUM_THREADS=1 (one torch thread; the collector and the answer checks share its core).
Reported: per-step wall time without the first step (warm-up), sync over async (goal >= 1.6x on the same layout),
and the share of each step vLLM sat idle (no request running, from polls of its /metrics) and the trainer sat idle
(waiting for its groups, or for running generations before a push). Writes benchmarks/results/grpo_async_vs_sync.json
and docs/img/grpo_async_vs_sync.png (where a step's time went, per run); `--render` redraws the PNG from the file.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from benchmarks.perf.grpo_learning import add_step_arguments, arithmetic_rows
from benchmarks.perf.lifecycle import child_process
from benchmarks.perf.plots import pyplot, save
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, Recorder, load_average, recording, results_path
from benchmarks.perf.vllm_server import MODEL_DIR, IdleMonitor, idle_fraction, pinned_to, vllm_server

FIGURE = REPO_ROOT / "docs" / "img" / "grpo_async_vs_sync.png"
POLL_S = 0.25  # vLLM's API server answers every poll on vLLM's one core: a few a second, not async_collector's 20
TRAINER_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Layout:
    """Where vLLM and the trainer run (None: no taskset, every core)."""

    vllm_cpus: Optional[str]
    vllm_omp_bind: str  # VLLM_CPU_OMP_THREADS_BIND: the cores vLLM's compute threads are bound to
    trainer_cpus: Optional[str]
    trainer_threads: int  # torch's intra-op threads (OMP_NUM_THREADS)


CORES = os.cpu_count() or 1
LAYOUTS = {"pinned": Layout("0", "0", "1", 1), "shared": Layout(None, f"0-{CORES - 1}", None, CORES)}
# (run, layout, synchronous), in the order they run; runs on one layout share its vLLM. Pinned needs 2 cores.
RUNS = (("async_pinned", "pinned", False), ("sync_pinned", "pinned", True), ("sync_shared", "shared", True))


def summarize(steps: list[dict[str, Any]], polls: list[tuple[float, bool]]) -> dict[str, Any]:
    """A run's figures from the trainer's step records and vLLM's (time, idle) polls. Step 0 is warm-up: a step's
    wall time is the time from the previous step's end to its own, so the timed window is step 0's end to the
    last step's end."""
    if len(steps) < 2:
        raise BenchmarkFailed(f"{len(steps)} step(s) ran: at least 2 are needed, the first being warm-up")
    ends = [s["ended_at"] for s in steps]
    step_s = [later - earlier for earlier, later in zip(ends, ends[1:])]
    timed = steps[1:]

    def mean(key: str) -> float:
        return round(statistics.mean(s[key] for s in timed), 3)

    return {"mean_step_s": round(statistics.mean(step_s), 2), "step_s": [round(s, 2) for s in step_s],
            "trainer_idle_fraction": round(sum(s["wait_s"] + s["refit_wait_s"] for s in timed) / sum(step_s), 3),
            "vllm_idle_fraction": idle_fraction(polls, ends[0], ends[-1]),
            "vllm_polls": sum(1 for at, _ in polls if ends[0] <= at <= ends[-1]),
            **{f"mean_{key}": mean(key) for key in ("wait_s", "train_s", "refit_wait_s", "push_s", "trajectory_age",
                                                    "reward", "token_mult_prob_error")}}


def ratios(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Per-step time of each synchronous run over the asynchronous one (above 1: async is faster)."""
    async_s = runs["async_pinned"]["mean_step_s"]
    return {"sync_over_async_pinned": round(runs["sync_pinned"]["mean_step_s"] / async_s, 3),
            "sync_shared_over_async_pinned": round(runs["sync_shared"]["mean_step_s"] / async_s, 3)}


def render(results: dict[str, Any], png: Path) -> None:
    """One bar per run: the trainer's mean step split into waiting for groups, training, waiting for running
    generations and pushing, labelled with the step time and both idle shares, from a results file."""
    plt = pyplot()

    runs = results["runs"]
    names = list(runs)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    left = [0.0] * len(names)
    for key, label in (("mean_wait_s", "waiting for its groups"), ("mean_train_s", "training"),
                       ("mean_refit_wait_s", "waiting for running generations"), ("mean_push_s", "pushing weights")):
        widths = [runs[name][key] for name in names]
        ax.barh(names, widths, left=left, label=label)
        left = [a + b for a, b in zip(left, widths)]
    for row, name in enumerate(names):
        run = runs[name]
        ax.text(left[row], row, f"  {run['mean_step_s']:.1f} s; idle: vLLM {run['vllm_idle_fraction']:.0%}, "
                f"trainer {run['trainer_idle_fraction']:.0%}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left) * 1.6)
    ax.set_xlabel("mean seconds per GRPO step (first step not timed)")
    settings = results["settings"]
    ax.set_title(f"SmolLM2-135M GRPO, {settings['prompts_per_step']} prompts x {settings['generations_per_prompt']}: "
                 f"sync / async on one core each = {results['ratios']['sync_over_async_pinned']:.2f}x", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, fontsize=7)
    save(fig, png)


def trainer_command(args: argparse.Namespace, url: str, rows: Path, out: Path, synchronous: bool) -> list[str]:
    """The example trainer's command line; one held-out row scored once (outside the timed steps)."""
    return [sys.executable, "-m", "examples.grpo.train", "--task", "math", "--rows", str(rows), "--eval-rows", "1",
            "--eval-samples", "1", "--model", str(MODEL_DIR), "--vllm-url", url, "--steps", str(args.steps),
            "--prompts-per-step", str(args.prompts), "--generations", str(args.generations),
            "--max-new-tokens", str(args.max_tokens), "--lr", str(args.lr), "--max-age", "1", "--no-wandb",
            "--out", str(out), *(["--synchronous"] if synchronous else [])]


def run_trainer(command: list[str], layout: Layout, url: str, out: Path) -> dict[str, Any]:
    """Run the trainer on its layout while polling vLLM; its summary with vLLM's polls."""
    out.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(layout.trainer_threads), "PYTHONPATH": str(REPO_ROOT)}
    with IdleMonitor(url, POLL_S).watching() as monitor, open(out / "train.log", "wb") as log, \
            child_process([*pinned_to(layout.trainer_cpus), *command], env=env, cwd=REPO_ROOT, stdout=log,
                          stderr=subprocess.STDOUT, grace_s=60) as popen:
        code = popen.wait(TRAINER_TIMEOUT_S)
    if code != 0:
        tail = (out / "train.log").read_text(errors="replace")[-3000:]
        raise BenchmarkFailed(f"the trainer exited with {code}: {' '.join(command)}\n{tail}")
    summary = summarize(json.loads((out / "summary.json").read_text())["steps"], monitor.samples)
    return {**summary, "vllm_polls_missed": monitor.missed, "load_average_at_end": load_average()}


def measure(args: argparse.Namespace, recorder: Recorder) -> None:
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="ng_grpo_async_") as tmp:
        rows = Path(tmp) / "arithmetic.jsonl"
        arithmetic_rows(rows)
        for layout_name, layout in LAYOUTS.items():
            workdir = Path(tmp) / layout_name
            workdir.mkdir()
            env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_OMP_THREADS_BIND": layout.vllm_omp_bind}
            with vllm_server(workdir, env=env, cpus=layout.vllm_cpus) as url:
                for name, _, synchronous in (run for run in RUNS if run[1] == layout_name):
                    command = trainer_command(args, url, rows, workdir / name, synchronous)
                    runs[name] = run_trainer(command, layout, url, workdir / name)
                    print(f"{name}: {runs[name]}", flush=True)
    found = ratios(runs)
    print(f"sync over async, per step: {found} (goal >= 1.6x on the pinned layout); idle share vLLM / trainer: "
          f"{ {n: (r['vllm_idle_fraction'], r['trainer_idle_fraction']) for n, r in runs.items()} }", flush=True)
    path = recorder.write(found, {
        "settings": {"steps": args.steps, "timed_steps": args.steps - 1, "prompts_per_step": args.prompts,
                     "generations_per_prompt": args.generations, "max_new_tokens": args.max_tokens,
                     "learning_rate": args.lr, "max_trajectory_age": 1, "vllm_poll_s": POLL_S,
                     "layouts": {name: asdict(layout) for name, layout in LAYOUTS.items()},
                     "run_layouts": {name: {"layout": layout, "synchronous": sync} for name, layout, sync in RUNS},
                     "model": "SmolLM2-135M-Instruct, float32"},
        "runs": runs,
        "load_average_at_end": load_average(),
    })
    if not args.quick:
        render(json.loads(path.read_text()), FIGURE)
        print(f"wrote {FIGURE}", flush=True)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="steps per run, the first being warm-up (at least 2)")
    add_step_arguments(parser)
    parser.add_argument("--quick", action="store_true",
                        help="2 steps of 2 prompts x 4, 16 tokens, results under quick/")
    parser.add_argument("--render", action="store_true", help="only redraw the PNG from the results file")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.prompts, args.generations, args.max_tokens = 2, 2, 4, 16
    if args.steps < 2:
        parser.error("--steps must be at least 2: the first step is warm-up and not timed")
    return args


def main() -> None:
    args = parse_args()
    if args.render:
        render(json.loads(results_path("grpo_async_vs_sync").read_text()), FIGURE)
        return
    with recording("grpo_async_vs_sync", args.quick) as recorder:
        measure(args, recorder)


if __name__ == "__main__":  # required: the math verifier's worker processes re-import their parent's main module
    main()

"""The async-vs-sync GRPO benchmark's arithmetic, from step records and vLLM polls made up here (no vLLM)."""

from pathlib import Path

import pytest

from benchmarks.perf.grpo_async_vs_sync import parse_args, ratios, render, summarize
from benchmarks.perf.figure_tables import grpo_async_vs_sync
from benchmarks.perf.results import BenchmarkFailed


def _step(step: int, ended_at: float, wait_s: float, refit_wait_s: float = 0.0) -> dict[str, float]:
    return {"step": step, "ended_at": ended_at, "wait_s": wait_s, "train_s": 4.0, "refit_wait_s": refit_wait_s,
            "push_s": 1.0, "trajectory_age": 1.0, "reward": 0.5, "token_mult_prob_error": 1.01}


def test_step_zero_is_warm_up_and_idle_shares_cover_the_timed_steps_only() -> None:
    # Step 0 ends at t=100 after a long warm-up; steps 1 and 2 take 10 s and 20 s.
    steps = [_step(0, 100.0, wait_s=90.0), _step(1, 110.0, wait_s=2.0, refit_wait_s=1.0), _step(2, 130.0, wait_s=6.0)]
    # vLLM idle during the warm-up (ignored), then busy 3 polls of 4 in the timed window.
    polls = [(50.0, True), (99.0, True), (105.0, False), (115.0, True), (120.0, False), (129.0, False), (140.0, True)]
    summary = summarize(steps, polls)
    assert summary["step_s"] == [10.0, 20.0] and summary["mean_step_s"] == 15.0
    assert summary["trainer_idle_fraction"] == round(9.0 / 30.0, 3)
    assert summary["vllm_idle_fraction"] == 0.25 and summary["vllm_polls"] == 4
    assert summary["mean_wait_s"] == 4.0 and summary["mean_refit_wait_s"] == 0.5


def test_one_step_is_no_measurement() -> None:
    with pytest.raises(BenchmarkFailed, match="at least 2"):
        summarize([_step(0, 100.0, wait_s=1.0)], [])


def test_ratios_are_synchronous_over_asynchronous_per_step_time() -> None:
    runs = {"async_pinned": {"mean_step_s": 20.0}, "sync_pinned": {"mean_step_s": 34.0},
            "sync_shared": {"mean_step_s": 25.0}}
    assert ratios(runs) == {"sync_over_async_pinned": 1.7, "sync_shared_over_async_pinned": 1.25}


def test_quick_is_tiny_and_a_single_step_is_refused() -> None:
    quick = parse_args(["--quick"])
    assert (quick.steps, quick.prompts, quick.generations, quick.max_tokens) == (2, 2, 4, 16)
    assert parse_args([]).steps == 6
    with pytest.raises(SystemExit):
        parse_args(["--steps", "1"])


def test_the_figure_and_the_docs_block_are_drawn_from_a_results_file(tmp_path: Path) -> None:
    steps = [_step(0, 100.0, wait_s=90.0), _step(1, 110.0, wait_s=2.0), _step(2, 130.0, wait_s=6.0)]
    runs = {name: {**summarize(steps, [(105.0, True)]), "load_average_at_end": "1.50 1.00 0.50"}
            for name in ("async_pinned", "sync_pinned", "sync_shared")}
    runs["sync_pinned"]["mean_step_s"] = 25.5
    results = {"benchmark": "grpo_async_vs_sync", "status": "ok", "command": "python -m benchmarks.perf.x",
               "machine": {"cores": 2, "cpu": "a CPU", "load_average_at_start": "0.10 0.20 0.30"},
               "load_average_at_end": "1.00 1.00 1.00", "runs": runs, "ratios": ratios(runs),
               "settings": {"prompts_per_step": 4, "generations_per_prompt": 8, "timed_steps": 2, "max_new_tokens": 32,
                            "learning_rate": 1e-5, "max_trajectory_age": 1, "model": "SmolLM2-135M-Instruct"}}
    render(results, tmp_path / "figure.png")
    assert (tmp_path / "figure.png").read_bytes().startswith(b"\x89PNG")
    block = grpo_async_vs_sync(results)
    assert "**1.7x** (goal 1.6x)" in block and "| sync pinned | 25.5 | 100% | 27% |" in block
    assert "img/grpo_async_vs_sync.png" in block

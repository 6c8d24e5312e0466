"""grpo_off_policy's arithmetic and figure, from a small fixture (no vLLM): the curve distance, a run's summary,
the docs block and the PNG rendered from a results dict."""

from pathlib import Path
from typing import Any

import pytest

from benchmarks.perf.figure_tables import grpo_off_policy
from benchmarks.perf.grpo_off_policy import curve_distance, render, summarize


def test_curve_distance_compares_trailing_means_over_the_steps_both_ran() -> None:
    # trailing means (window 3): [0, 0.5, 0.667] vs [1, 1, 1] -> |diff| 1, 0.5, 0.333: mean 0.611
    assert curve_distance([0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0]) == pytest.approx((1 + 0.5 + 1 / 3) / 3)
    assert curve_distance([0.5, 0.5], [0.5, 0.5, 0.0]) == 0.0


def _step(step: int, reward: float, age: float) -> dict[str, Any]:
    return {"step": step, "reward": reward, "trajectory_age": age, "wait_s": 1.0, "train_s": 2.0,
            "refit_wait_s": 0.0, "push_s": 1.0, "importance_weight_mean": 1.0 + step / 100,
            "importance_truncated_fraction": 0.0, "clipped_fraction": 0.01 * step, "elapsed_s": 10.0 * (step + 1)}


def test_a_runs_summary_has_its_means_final_reward_and_step_time() -> None:
    summary = summarize([_step(i, r, min(i, 1)) for i, r in enumerate([0.0, 0.25, 0.5, 0.75, 1.0])])
    assert summary["mean_reward"] == 0.5 and summary["final_reward"] == 0.625  # the last 4 steps
    assert summary["mean_age"] == 0.8 and summary["mean_step_s"] == 4.0 and summary["elapsed_s"] == 50.0


def _results() -> dict[str, Any]:
    def run(age: int, corrected: bool, seed: int, rewards: list[float]) -> dict[str, Any]:
        steps = [_step(i, r, min(i, age)) for i, r in enumerate(rewards)]
        return {"age": age, "importance_sampling": corrected, "seed": seed, "summary": summarize(steps),
                "steps": steps}

    return {"benchmark": "grpo_off_policy", "status": "ok", "command": "python -m benchmarks.perf.grpo_off_policy",
            "machine": {"cores": 2, "cpu": "a CPU", "load_average_at_start": "0.10 0.20 0.30",
                        "load_average_at_end": "1.00 1.00 1.00"},
            "settings": {"steps": 3, "ages": [0, 1], "prompts_per_step": 4, "generations_per_prompt": 8,
                         "learning_rate": 1e-5, "seed": 0, "importance_sampling_cap": 2.0, "trailing_window": 3,
                         "final_steps": 4, "model": "SmolLM2-135M-Instruct, float32 trainer and generator"},
            "noise_distance": 0.25, "distance_from_age0": {"age1_on": 0.125},
            "runs": {"age0_off": run(0, False, 0, [0.0, 0.5, 1.0]), "age1_on": run(1, True, 0, [0.0, 0.25, 0.75]),
                     "age0_off_seed1": run(0, False, 1, [0.25, 0.5, 0.5])}}


def test_the_docs_block_and_the_figure_are_rendered_from_a_results_dict(tmp_path: Path) -> None:
    block = grpo_off_policy(_results())
    assert "| 0 | off | 0 | 0.5 | 0.5 | baseline |" in block
    assert "| 1 | on | 0 | 0.3333 | 0.3333 | **0.125** (0.50x noise) |" in block
    assert "0.25 (the noise)" in block and "img/grpo_off_policy.png" in block
    png = tmp_path / "img" / "grpo_off_policy.png"
    render(_results(), png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

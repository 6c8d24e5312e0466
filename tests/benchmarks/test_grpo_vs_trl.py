"""grpo_vs_trl's arithmetic and figure, from a small fixture (no vLLM, no TRL): when each side first reaches TRL's
final training reward, and the PNG rendered from a results dict."""

from pathlib import Path
from typing import Any

from benchmarks.perf.figure_tables import grpo_vs_trl
from benchmarks.perf.grpo_vs_trl import reach, render


def _steps(points: list[tuple[float, float]]) -> list[dict[str, Any]]:
    return [{"step": i, "elapsed_s": t, "reward": r} for i, (t, r) in enumerate(points)]


TRL = _steps([(10, 0.0), (20, 0.25), (30, 0.5), (40, 0.75)])  # final: mean of the last 3 = 0.5, first at 40 s
OURS = _steps([(5, 0.25), (8, 0.75), (12, 0.5)])  # trailing means 0.25, 0.5 (at 8 s), 0.5


def test_time_to_trl_final_reward_uses_trailing_means_on_both_sides() -> None:
    reached = reach(OURS, TRL, window=3)
    assert reached == {"trl_final_reward": 0.5, "window_steps": 3, "ours_s": 8, "trl_s": 40, "trl_end_s": 40,
                       "ours_over_trl": 0.2, "ours_over_trl_end": 0.2}


def test_a_side_that_never_reaches_it_has_no_ratio_and_a_short_run_narrows_the_window() -> None:
    reached = reach(_steps([(5, 0.0), (9, 0.25)]), TRL[:2], window=3)
    assert reached["window_steps"] == 2 and reached["trl_final_reward"] == 0.125 and reached["trl_s"] == 20
    assert reached["ours_s"] == 9 and reached["ours_over_trl"] == 0.45
    never = reach(_steps([(5, 0.0)]), TRL, window=3)
    assert never["ours_s"] is None and never["ours_over_trl"] is None and never["trl_s"] == 40


def _results() -> dict[str, Any]:
    held = {"greedy": 0.5, "sampled": 0.25}
    return {"benchmark": "grpo_vs_trl", "status": "ok", "command": "python -m benchmarks.perf.grpo_vs_trl",
            "machine": {"cores": 2, "cpu": "a CPU", "load_average_at_start": "0.10 0.20 0.30"},
            "load_average_at_end": "1.00 1.00 1.00",
            "settings": {"ours_mode": "synchronous", "prompts_per_step": 4, "generations_per_prompt": 8, "budget_s": 40.0, "learning_rate": 1e-5,
                         "model": "SmolLM2-135M-Instruct, float32", "held_out_rows": 30},
            "reach": reach(OURS, TRL, window=3), "held_out": {"start": held, "ours": held, "trl": held},
            "ours": {"steps": OURS}, "trl": {"steps": TRL}}


def test_the_figure_and_the_docs_block_are_rendered_from_a_results_dict(tmp_path: Path) -> None:
    png = tmp_path / "img" / "grpo_vs_trl.png"
    render(_results(), png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    block = grpo_vs_trl(_results())
    assert "**0.2x** TRL's time" in block and "ours (synchronous) ran 3 steps, TRL 4" in block
    assert "img/grpo_vs_trl.png" in block

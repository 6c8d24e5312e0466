"""The example GRPO trainer (examples/grpo/train.py) runs two short steps end to end against a real vLLM, natively
and through the agent servers: its CSV has every column and the dtype of each side, the first step (its batch made on
the weights it trains, age 0) agrees with the generator to token_mult_prob_error 1.002 (float32 on both sides), and
vLLM really serves the trained weights afterwards (it reports the last version, and its log-probs for a fixed prompt
moved)."""

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from examples.grpo.step_log import COLUMNS
from tests.helpers.model import MODEL_DIR, restore_bundled_weights
from tests.helpers.stack import REPO_ROOT

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
PROMPT = TOKENIZER.apply_chat_template([{"role": "user", "content": "What is 6 + 6? Answer with just the number."}],
                                       add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
STEPS = 2


def _probe(base_url: str, model: str) -> tuple[list[int], list[float]]:
    """vLLM's greedy continuation of a fixed prompt and its log-probs."""
    reply = httpx.post(f"{base_url}/completions", trust_env=False, timeout=120, json={
        "model": model, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "logprobs": 0,
        "return_token_ids": True}).json()["choices"][0]
    return reply["token_ids"], reply["logprobs"]["token_logprobs"]


@pytest.mark.vllm
@pytest.mark.parametrize("path", [[], ["--agents"]], ids=["native", "agents"])
def test_the_example_trainer_runs_two_steps_and_vllm_serves_its_weights(vllm_weights_server: Any, tmp_path: Path,
                                                                         path: list[str]) -> None:
    url, model = vllm_weights_server.base_url, vllm_weights_server.model
    before = _probe(url, model)
    out = tmp_path / "out"
    # 8 sampled answers per prompt, 2 prompts, 2 steps: the model is right about 1 time in 4 at temperature 1, so
    # some group has mixed rewards (a gradient) unless all 4 groups agree, which has odds of about 1 in 10^4.
    command = [sys.executable, "-m", "examples.grpo.train", "--task", "math", *path, "--vllm-url", url,
               "--steps", str(STEPS), "--prompts-per-step", "2", "--generations", "8", "--eval-rows", "2",
               "--eval-samples", "1", "--max-new-tokens", "16", "--lr", "1e-4", "--out", str(out)]
    try:
        result = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "WANDB_MODE": "offline"},
                                capture_output=True, text=True, timeout=1200)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        with open(out / "steps.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert list(rows[0]) == COLUMNS
        assert [int(r["step"]) for r in rows] == list(range(STEPS))
        assert [int(r["weight_version"]) for r in rows] == [1, 2]
        numeric = [c for c in COLUMNS if c not in ("importance_sampling", "trainer_dtype", "generator_dtype")]
        for row in rows:
            assert all(math.isfinite(float(row[c])) for c in numeric), row
            assert (row["trainer_dtype"], row["generator_dtype"], row["importance_sampling"]) == (
                "float32", "float32", "True"), row  # asynchronous with max age 1: the correction is on
            assert float(row["train_s"]) > 0 and float(row["push_s"]) > 0 and float(row["wait_s"]) >= 0
            assert 0.0 <= float(row["reward"]) <= 1.0 and float(row["token_mult_prob_error"]) >= 1.0
        assert float(rows[0]["trajectory_age"]) == 0.0 and float(rows[0]["token_mult_prob_error"]) <= 1.002, rows[0]
        assert any(float(r["grad_norm"]) > 0 for r in rows), "no group had mixed rewards: nothing was learned"
        summary = json.loads((out / "summary.json").read_text())
        assert 0.0 <= summary["eval_before"] <= 1.0 and 0.0 <= summary["eval_after"] <= 1.0
        assert (summary["trainer_dtype"], summary["generator_dtype"], summary["importance_sampling"]) == (
            "float32", "float32", True)
        assert list((out / "wandb").glob("offline-run-*")), "no offline W&B run"
        info = httpx.get(f"{url.removesuffix('/v1')}/weight_info", trust_env=False, timeout=30).json()
        assert info["weight_version"] == str(STEPS)
        after = _probe(url, model)
        moved = after[0] != before[0] or max(abs(a - b) for a, b in zip(after[1], before[1])) > 1e-4
        assert moved, f"vLLM's log-probs did not change: {before} vs {after}"
    finally:
        restore_bundled_weights(vllm_weights_server)

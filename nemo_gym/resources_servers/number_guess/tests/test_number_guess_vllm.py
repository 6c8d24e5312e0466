"""The number-guessing game served for ng_collect_rollouts against the real vLLM (SmolLM2-135M-Instruct): a real
`ng_run` stack of number_guess/configs/number_guess.yaml + configs/vllm_model.yaml, multi-turn rollouts, token ids on request."""

import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import orjson
import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.agents.results import result_to_completion
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT, Stack, environment_config, running_stack

GAMES = REPO_ROOT / "nemo_gym" / "resources_servers" / "number_guess" / "data" / "example.jsonl"
MAX_TURNS = 8  # nemo_gym/resources_servers/number_guess/configs/number_guess.yaml
ROWS = 4
GREEDY = ["+responses_create_params.temperature=0.0", "+responses_create_params.max_output_tokens=16"]


@pytest.fixture(scope="module")
def stack(vllm_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    configs = f"{environment_config('number_guess')},{REPO_ROOT}/configs/vllm_model.yaml"
    model = [f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
             f"+policy_model_name={vllm_server.model}"]
    with running_stack([f"+config_paths=[{configs}]", *model], cwd=tmp_path_factory.mktemp("ng_vllm")) as running:
        yield running


def _collect(stack: Stack, output: Path, *overrides: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-c", "from nemo_gym.cli.collect import main; main()",
         "+agent_name=number_guess_agent", f"+input_jsonl_fpath={GAMES}", f"+output_jsonl_fpath={output}",
         f"+limit={ROWS}", f"+num_samples_in_parallel={ROWS}", f"+head_server_url={stack.head_url}",
         *GREEDY, *overrides],
        cwd=output.parent, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    assert sorted(row["_ng_task_index"] for row in rows) == list(range(ROWS))
    return rows


def _assistant_items(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in row["response"]["output"] if item.get("role") == "assistant"]


@pytest.mark.vllm
def test_collected_games_alternate_model_and_game_turns(stack: Stack, tmp_path: Path) -> None:
    rows = _collect(stack, tmp_path / "games.jsonl")
    for row in rows:
        output = row["response"]["output"]
        turns = row["turns"]
        assert 0.0 <= row["reward"] <= 1.0 and 1 <= turns <= MAX_TURNS
        assert [item["role"] for item in output] == ["assistant", "user"] * turns
        observations = ["".join(part["text"] for part in item["content"]) for item in output[1::2]]
        assert all(text in ("Higher.", "Lower.") or text.startswith(("Invalid guess:", "Correct!"))
                   for text in observations), observations
        solved = observations[-1] == f"Correct! The number was {row['secret']}."
        assert row["solved"] is solved and row["reward"] == (1.0 if solved else 0.0)
        # An unsolved game ends only at the turn limit (the context is far from full).
        assert solved or turns == MAX_TURNS
    metrics = orjson.loads((tmp_path / "games_aggregate_metrics.json").read_bytes())
    assert metrics[0]["agent_ref"]["name"] == "number_guess_agent"
    assert metrics[0]["agent_metrics"]["mean/turns"] == pytest.approx(sum(r["turns"] for r in rows) / ROWS)


@pytest.mark.vllm
def test_token_ids_come_back_on_every_assistant_item(stack: Stack, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    rows = _collect(stack, tmp_path / "tokens.jsonl", "+responses_create_params.return_token_id_information=true")
    for row in rows:
        items = _assistant_items(row)
        assert len(items) == row["turns"]
        for item in items:
            assert item["generation_token_ids"] and item["prompt_token_ids"]
            assert len(item["generation_log_probs"]) == len(item["generation_token_ids"]) <= 16
        # Each turn's prompt continues the earlier tokens exactly, so the rollout is one trainable sequence:
        # the prompt, then per turn the generation and the observation that follows it (the last one too).
        completion, counts = result_to_completion(row, tokenizer, max_seq_len=2048)
        assert [m["role"] for m in completion.message_log] == ["user"] + ["assistant", "user"] * row["turns"]
        assert completion.reward == row["reward"] and counts.turns == row["turns"]
        assert counts.terminated is row["solved"] and counts.max_turns_reached is not row["solved"]

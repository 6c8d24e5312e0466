"""MathEnvironment and NumberGuessEnvironment in token-level multi-turn rollouts on the real vLLM (SmolLM2), both
tasks in one batch: games run turn by turn with their state in extra_env_info, math samples end after one turn."""

from typing import Any

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.environments.number_guess import NumberGuessEnvironment
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.rollouts import run_async_multi_turn_rollout
from nemo_gym.resources_servers.math.generate_arithmetic import generate_rows as arithmetic_rows
from nemo_gym.resources_servers.math.verifier import extract_answer
from nemo_gym.resources_servers.number_guess import game
from nemo_gym.resources_servers.number_guess.generate import generate_rows as game_rows
from tests.helpers.model import MODEL_DIR

MAX_TURNS = 8
TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)


def _batch() -> BatchedDataDict:
    template = ChatTemplate(TOKENIZER)
    samples: list[dict[str, Any]] = []
    for row in game_rows(4, seed=0):
        samples.append({"message_log": template.prompt_message_log(row["responses_create_params"]["input"]),
                        "extra_env_info": game.game_state(row), "task_name": "number_guess"})
    for row in arithmetic_rows(4, seed=0):
        samples.append({"message_log": template.prompt_message_log(row["responses_create_params"]["input"]),
                        "extra_env_info": {"ground_truth": row["expected_answer"]}, "task_name": "math"})
    return BatchedDataDict({key: [s[key] for s in samples] for key in samples[0]} | {"idx": list(range(8))})


def _observation_ok(text: str) -> bool:
    return text in ("Higher.", "Lower.") or text.startswith(("Invalid guess:", "Correct! The number was"))


@pytest.mark.vllm
def test_both_environments_in_one_rollout_batch(vllm_server) -> None:
    config = {"model_name": vllm_server.model, "max_new_tokens": 16, "max_seq_len": 2048,
              "pad_token_id": TOKENIZER.pad_token_id}
    with MathEnvironment(num_workers=1) as math_env, VllmHttpGeneration(config, vllm_server.base_url) as backend:
        envs = {"number_guess": NumberGuessEnvironment(), "math": math_env}
        batch, metrics = run_async_multi_turn_rollout(backend, _batch(), TOKENIZER, envs, max_seq_len=2048,
                                                      max_rollout_turns=MAX_TURNS, greedy=True)
    for log, info, reward, task in zip(batch["message_log"], batch["extra_env_info"], batch["total_reward"],
                                       batch["task_name"]):
        reply = log[1:]
        if task == "math":
            assert [m["role"] for m in reply] == ["assistant", "environment"]
            answer = extract_answer(reply[0]["content"])
            correct = answer is not None and float(answer) == float(info["ground_truth"])
            assert float(reward) == (1.0 if correct else 0.0)
            assert reply[1]["content"] == f"Environment: {'correct' if correct else 'incorrect'}"
            continue
        turns = len(reply) // 2
        assert [m["role"] for m in reply] == ["assistant", "user"] * turns and 1 <= turns <= MAX_TURNS
        observations = [m["content"] for m in reply[1::2]]
        assert all(_observation_ok(text) for text in observations), observations
        solved = observations[-1] == f"Correct! The number was {info['secret']}."
        assert float(reward) == (1.0 if solved else 0.0) and (solved or turns == MAX_TURNS)
        # Each move's state became the next turn's extra_env_info; the rollout stores no state after the move
        # that ends a sample (NeMo RL's rule), so a solved game's state lacks its winning guess.
        moves = [game.play_turn(game.game_state({**info, "guesses": []}), m["content"]).guess for m in reply[::2]]
        assert info["guesses"] == (moves[:-1] if solved else moves)
    assert metrics["max_turns_per_sample"] <= MAX_TURNS

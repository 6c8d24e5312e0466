"""An agent's /run result as a Completion and its counts, without servers: the counts mean what the native turn
loop's mean (a game that ran out of turns is max_turns_reached, not a natural termination; a turn cut midway marks
the rollout truncated), and the log ends with the environment's answer to the last generation, as natively. The
real-stack tests (test_cross_path_vllm.py) show both paths giving the same metrics for one scenario."""

from typing import Any, Optional

import pytest
import torch
from transformers import AutoTokenizer

from nemo_gym.experience.agents.results import result_to_completion
from nemo_gym.experience.interfaces import LLMMessageLogType
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import flat_token_ids, message_log_length
from tests.helpers.model import MODEL_DIR

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
TEMPLATE = ChatTemplate(TOKENIZER)
OBSERVATION = "Higher."


def _game(turns: int, end: Optional[str], cut: set[int] = frozenset()) -> tuple[dict[str, Any], LLMMessageLogType]:
    """A /run result of a number-guessing game of `turns` guesses, each answered "Higher.", as multi_turn_agent
    and vllm_model give it (token ids on each generation's item), and the message log the native loop would keep."""
    log = TEMPLATE.prompt_message_log([{"role": "user", "content": "Guess my number from 1 to 100."}])
    output: list[dict[str, Any]] = []
    for turn in range(turns):
        text = str(50 + turn)
        generated = TEMPLATE.encode(text) + [TOKENIZER.eos_token_id]
        output.append({"type": "message", "role": "assistant", "status": "incomplete" if turn in cut else "completed",
                       "content": [{"type": "output_text", "text": text}],
                       "prompt_token_ids": flat_token_ids(log).tolist(), "generation_token_ids": generated,
                       "generation_log_probs": [-0.5] * len(generated)})
        log.append({"role": "assistant", "content": text, "token_ids": torch.tensor(generated)})
        observation = {"role": "user", "content": OBSERVATION}
        log.append({**observation, "token_ids": torch.tensor(TEMPLATE.observation_ids(log, observation))})
        output.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": OBSERVATION}]})
    response: dict[str, Any] = {"status": "completed", "output": output}
    if end is not None:
        response["rollout_end"] = end
    return {"reward": 0.0, "secret": 98, "response": response}, log


def _ids(log: LLMMessageLogType) -> list[tuple[str, list[int]]]:
    return [(m["role"], m["token_ids"].tolist()) for m in log]


def test_a_game_that_ran_out_of_turns_is_max_turns_reached_not_terminated() -> None:
    result, native_log = _game(2, "max_turns")
    completion, counts = result_to_completion(result, TOKENIZER, 2048, max_rollout_turns=2)
    assert _ids(completion.message_log) == _ids(native_log)  # the last "Higher." included, as natively
    assert (counts.terminated, counts.max_turns_reached, counts.truncated, counts.turns) == (False, True, False, 2)
    observations = [m for m in native_log[1:] if m["role"] == "user"]
    assert counts.env_tokens == message_log_length(observations) and completion.env_extras["secret"] == 98


def test_an_episode_ended_on_its_last_allowed_turn_is_terminated() -> None:
    result, _ = _game(2, "terminated")
    _, counts = result_to_completion(result, TOKENIZER, 2048, max_rollout_turns=2)
    assert (counts.terminated, counts.max_turns_reached) == (True, False)


def test_a_turn_cut_midway_marks_the_rollout_truncated() -> None:
    result, _ = _game(3, "max_turns", cut={0})
    completion, counts = result_to_completion(result, TOKENIZER, 2048, max_rollout_turns=3)
    assert completion.truncated and counts.truncated and counts.max_turns_reached


@pytest.mark.parametrize("turns, limit, max_turns_reached", [(2, 2, True), (1, 2, False)])
def test_an_agent_that_does_not_say_how_it_ended_is_read_by_its_turns(turns: int, limit: int,
                                                                       max_turns_reached: bool) -> None:
    result, _ = _game(turns, None)
    _, counts = result_to_completion(result, TOKENIZER, 2048, max_rollout_turns=limit)
    assert (counts.max_turns_reached, counts.terminated) == (max_turns_reached, not max_turns_reached)


def test_a_last_answer_that_does_not_fit_is_cut_and_ends_the_episode_truncated() -> None:
    result, native_log = _game(2, "max_turns")
    room = 2
    max_seq_len = message_log_length(native_log[:-1]) + room
    completion, counts = result_to_completion(result, TOKENIZER, max_seq_len, max_rollout_turns=2)
    assert len(flat_token_ids(completion.message_log)) == max_seq_len
    assert completion.message_log[-1]["token_ids"].tolist() == native_log[-1]["token_ids"].tolist()[:room]
    # As natively: no room ends the episode before the turn limit does.
    assert (counts.truncated, counts.max_turns_reached, counts.terminated) == (True, False, False)

"""An agent server's rollout result as a token-level Completion and its counts for the rollout metrics.

With `return_token_id_information`, the last output item of each generation carries the token ids vLLM saw
(`prompt_token_ids`) and produced (`generation_token_ids`, `generation_log_probs`). Each generation's prompt must
start with everything before it (earlier prompt + generations): the new part becomes one environment message and
the generation one assistant message, so the flattened log is exactly what vLLM processed. A prompt that does not
continue the earlier tokens (the template re-tokenized an earlier turn differently) is a TokenAlignmentError, not
a silently different sequence. The environment's answer to the last generation (its observation, or tool outputs)
follows it as on the native path: the chat template's tokens for it, cut to the room left under max_seq_len.

The counts mean what the native turn loop's do (turns/rollouts.py): `terminated` when the environment ended the
episode, `max_turns_reached` when the turn limit stopped one that had not ended (both from the agent's
`rollout_end`, protocol.ROLLOUT_END_FIELD), `truncated` when any generation was cut (its items' status
`incomplete`) or the conversation ran out of room. An agent that does not say how it ended (NeMo Gym's own) is read
by the one rule its output allows: cut, then out of turns when it used every turn the request allowed, else
terminated.
"""

from typing import Any, Optional, Sequence

import torch

from nemo_gym.experience.errors import TokenAlignmentError
from nemo_gym.experience.interfaces import Completion, LLMMessageLogType
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import message_log_length
from nemo_gym.experience.turns.rollout_metrics import CompletionCounts
from nemo_gym.protocol import MAX_TURNS, ROLLOUT_END_FIELD, TERMINATED, TRUNCATED, input_to_messages, token_info

# Output items that carry the environment's side of the conversation; anything else came from the model.
_ENVIRONMENT_ITEMS = {"function_call_output": "tool"}
_FIELDS_NOT_IN_EXTRAS = ("response", "responses_create_params")
_INCOMPLETE = "incomplete"


def _environment_role(items: Sequence[dict[str, Any]]) -> str:
    for item in items:
        if item.get("type") in _ENVIRONMENT_ITEMS:
            return _ENVIRONMENT_ITEMS[item["type"]]
    return "user"


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def message_log_from_output(output: Sequence[dict[str, Any]], tokenizer: Any) -> tuple[LLMMessageLogType, bool]:
    """The message log of a rollout's output items up to its last generation, and whether every generated token
    has a log-prob."""
    log: LLMMessageLogType = []
    sequence: list[int] = []
    pending: list[dict[str, Any]] = []
    logprobs_valid = True
    for item in output:
        pending.append(item)
        info = token_info(item)
        if info is None:
            continue
        prompt, generated = list(info["prompt_token_ids"] or []), list(info["generation_token_ids"] or [])
        logprobs = list(info["generation_log_probs"] or [])
        if prompt[: len(sequence)] != sequence:
            at = _first_difference(prompt, sequence)
            raise TokenAlignmentError(
                f"generation {sum(m['role'] == 'assistant' for m in log)}: its prompt does not continue the "
                f"earlier tokens (first difference at position {at} of {len(sequence)}); the model server "
                f"re-tokenized an earlier turn")
        new = prompt[len(sequence):]
        if new:
            role = "user" if not log else _environment_role(pending)
            log.append({"role": role, "content": tokenizer.decode(new, skip_special_tokens=True),
                        "token_ids": torch.tensor(new, dtype=torch.long)})
        log.append({"role": "assistant", "content": tokenizer.decode(generated, skip_special_tokens=True),
                    "token_ids": torch.tensor(generated, dtype=torch.long),
                    "generation_logprobs": torch.tensor(logprobs, dtype=torch.float32)})
        logprobs_valid &= len(logprobs) == len(generated)
        sequence = prompt + generated
        pending = []
    if not log:
        raise TokenAlignmentError(
            "the agent's response carries no token ids: the model server must return them "
            "(vllm_model with return_token_id_information)")
    return log, logprobs_valid


def _trailing_environment_items(output: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items after the last generation: the environment's answer to it."""
    last = max(i for i, item in enumerate(output) if token_info(item) is not None)
    return list(output[last + 1:])


def _append_final_observation(log: LLMMessageLogType, items: list[dict[str, Any]], tokenizer: Any,
                              max_seq_len: int) -> bool:
    """Append the environment's answer to the last generation, cut to the room left; whether it had to be cut."""
    messages = [{"role": m["role"], "content": m["content"]} for m in input_to_messages(items)]
    if not messages:
        return False
    ids = ChatTemplate(tokenizer).messages_ids(log, messages)
    room = max(0, max_seq_len - message_log_length(log))
    out_of_room = len(ids) >= room  # as the native turn loop judges it (turns/rollouts.py, _apply_env_turn)
    log.append({"role": _environment_role(items), "content": "".join(str(m["content"]) for m in messages),
                "token_ids": torch.tensor(ids[:room], dtype=torch.long)})
    return out_of_room


def _rollout_end(response: dict[str, Any], generations: int, cut: bool, max_rollout_turns: Optional[int]) -> str:
    reported = response.get(ROLLOUT_END_FIELD)
    if reported in (TERMINATED, MAX_TURNS, TRUNCATED):
        return str(reported)
    if response.get("status") == _INCOMPLETE or cut:
        return TRUNCATED
    return MAX_TURNS if max_rollout_turns and generations >= max_rollout_turns else TERMINATED


def result_to_completion(result: dict[str, Any], tokenizer: Any, max_seq_len: int,
                         max_rollout_turns: Optional[int] = None) -> tuple[Completion, CompletionCounts]:
    """A Completion from one `/run` result (the verifier's response: `reward`, `response`, extra fields), and its
    counts for the rollout metrics; `max_rollout_turns` is the limit the request carried."""
    response = result.get("response") or {}
    output = response.get("output") or []
    message_log, logprobs_valid = message_log_from_output(output, tokenizer)
    assistant = [m for m in message_log if m["role"] == "assistant"]
    out_of_room = _append_final_observation(message_log, _trailing_environment_items(output), tokenizer, max_seq_len)
    cut = any(token_info(item) is not None and item.get("status") == _INCOMPLETE for item in output)
    truncated = (cut or out_of_room or response.get("status") == _INCOMPLETE
                 or message_log_length(message_log) >= max_seq_len)
    end = _rollout_end(response, len(assistant), cut, max_rollout_turns)
    completion = Completion(
        message_log=message_log,
        env_extras={k: v for k, v in result.items() if k not in _FIELDS_NOT_IN_EXTRAS},
        truncated=truncated,
        reward=float(result["reward"]),
        logprobs_valid=logprobs_valid,
    )
    assistant_tokens = sum(len(m["token_ids"]) for m in assistant)
    counts = CompletionCounts(
        turns=len(assistant),
        assistant_tokens=assistant_tokens,
        env_tokens=message_log_length(message_log[1:]) - assistant_tokens,
        terminated=end == TERMINATED,
        truncated=truncated,
        max_turns_reached=end == MAX_TURNS and not out_of_room,  # no room ends an episode first, as natively
        total_reward=completion.reward,
    )
    return completion, counts

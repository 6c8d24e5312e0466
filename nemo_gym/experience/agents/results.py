"""An agent server's rollout result as a token-level Completion.

With `return_token_id_information`, the last output item of each generation carries the token ids vLLM saw
(`prompt_token_ids`) and produced (`generation_token_ids`, `generation_log_probs`). Each generation's prompt must
start with everything before it (earlier prompt + generations): the new part becomes one environment message and
the generation one assistant message, so the flattened log is exactly what vLLM processed. A prompt that does not
continue the earlier tokens (the template re-tokenized an earlier turn differently) is a TokenAlignmentError, not
a silently different sequence.
"""

from typing import Any, Sequence

import torch

from nemo_gym.experience.errors import TokenAlignmentError
from nemo_gym.experience.interfaces import Completion, LLMMessageLogType
from nemo_gym.protocol import token_info

# Output items that carry the environment's side of the conversation; anything else came from the model.
_ENVIRONMENT_ITEMS = {"function_call_output": "tool"}
_FIELDS_NOT_IN_EXTRAS = ("response", "responses_create_params")


def _environment_role(items: Sequence[dict[str, Any]]) -> str:
    for item in items:
        if item.get("type") in _ENVIRONMENT_ITEMS:
            return _ENVIRONMENT_ITEMS[item["type"]]
    return "user"


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def message_log_from_output(output: Sequence[dict[str, Any]], tokenizer: Any) -> tuple[LLMMessageLogType, bool]:
    """The message log of a rollout's output items, and whether every generated token has a log-prob."""
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


def result_to_completion(result: dict[str, Any], tokenizer: Any, max_seq_len: int) -> Completion:
    """A Completion from one `/run` result (the verifier's response: `reward`, `response`, extra fields)."""
    response = result.get("response") or {}
    message_log, logprobs_valid = message_log_from_output(response.get("output") or [], tokenizer)
    length = sum(len(m["token_ids"]) for m in message_log)
    return Completion(
        message_log=message_log,
        env_extras={k: v for k, v in result.items() if k not in _FIELDS_NOT_IN_EXTRAS},
        truncated=response.get("status") == "incomplete" or length >= max_seq_len,
        reward=float(result["reward"]),
        logprobs_valid=logprobs_valid,
    )

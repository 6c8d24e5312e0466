"""A simulated replica's tokenizer and chat template, and its prompts as the prefix cache sees them.

- A text is one token per 4 characters (a shorter last one), each id a function of its characters, so the same
  text always has the same ids; a generated answer is the text `ANSWER_WORD` repeated, one token each, and ends with
  `END_OF_TURN` when it stops on its own (vLLM keeps the end-of-turn id in `token_ids`, not in the text).
- The chat template is append-only, as vllm_model's token-exact continuation needs: each message is its role's id,
  its content's ids, `END_OF_TURN` and `NEWLINE`; the generation prompt is the assistant role's id. Re-rendering an
  answer from its text gives the prompt and generated ids back, followed by `NEWLINE`.
- The prefix cache sees a prompt as vLLM's does, in blocks of 16 ids, each named by a hash chained over the blocks
  before it; a finished request caches its prompt and generated ids under the key of their last whole block, the
  start of the same conversation's next prompt whichever endpoint asks it (chat or token ids).
"""

import zlib
from array import array
from typing import Any, Sequence

CHARS_PER_TOKEN = 4
ROLE_IDS = {"system": 10, "user": 11, "assistant": 12, "tool": 13}
OTHER_ROLE = 14
END_OF_TURN = 2
NEWLINE = 3
ANSWER_WORD = "tok "  # one token of generated text
_FIRST_TEXT_ID = 1000
_TEXT_IDS = 30_000


def text_ids(text: str) -> list[int]:
    raw = text.encode()
    raw += b" " * (-len(raw) % CHARS_PER_TOKEN)
    return [_FIRST_TEXT_ID + word % _TEXT_IDS for word in array("I", raw)]


ANSWER_ID = text_ids(ANSWER_WORD)[0]


def content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return ""


def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> list[int]:
    """The chat template (see the module docstring)."""
    ids: list[int] = []
    for message in messages:
        ids.append(ROLE_IDS.get(str(message.get("role")), OTHER_ROLE))
        ids += text_ids(content_text(message.get("content")))
        ids += (END_OF_TURN, NEWLINE)
    if add_generation_prompt:
        ids.append(ROLE_IDS["assistant"])
    return ids


def answer(output_tokens: int, stopped: bool) -> tuple[list[int], str]:
    """The ids and text of an answer of `output_tokens` tokens: the last is END_OF_TURN when it `stopped`."""
    words = output_tokens - 1 if stopped else output_tokens
    return [ANSWER_ID] * words + ([END_OF_TURN] if stopped else []), ANSWER_WORD * words


def block_prefixes(ids: Sequence[int], block: int) -> list[tuple[int, int]]:
    """(key, tokens) at every whole block of `ids`, shortest first, each key chained over the blocks before."""
    packed = array("I", ids).tobytes()
    out, key = [], 0
    for end in range(block, len(ids) + 1, block):
        key = zlib.crc32(packed[4 * (end - block):4 * end], key)
        out.append((key, end))
    return out


def draw_seed(prompt: Sequence[int], prefixes: Sequence[tuple[int, int]]) -> int:
    """What an output length is drawn from: the prompt (the same conversation, the same length, on any replica)."""
    return prefixes[-1][0] ^ len(prompt) if prefixes else zlib.crc32(array("I", prompt).tobytes())

"""What a simulated replica makes of a Chat Completions request, and the reply it sends: token counts from text,
prefixes for the cache, and the weather task's answers.

Tokens are counted as 4 characters each, plus 4 per message for the chat template. The prompt's cacheable prefixes
are its messages one by one: prefix k is named by a hash chained over the first k messages (role, text, tool calls by
name and arguments: what the model saw, not the ids), so the next turn of a conversation finds the previous turn's
prompt and answer. The answer plays the weather task (benchmarks/perf/stub_chat.py) over several turns: a row whose
user message says `[turns=N]` gets a `get_weather` call for the city it names on each of its first N-1 turns, then
text; the text of every answer is as long as the drawn output length, so the bytes our stack carries are real.
"""

import re
import time
import zlib
from typing import Any

import orjson

from benchmarks.fleet.engine import SimRequest
from benchmarks.fleet.replica import Completion
from benchmarks.fleet.workload import Workload

CHARS_PER_TOKEN = 4
TEMPLATE_TOKENS = 4
_TURNS = re.compile(r"\[turns=(\d+)\]")
_CITY = re.compile(r"weather in ([A-Za-z ]+)\?")
_WORD = "tok "  # one token of generated text


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return ""


def _canonical(message: dict[str, Any]) -> bytes:
    calls = [(call.get("function") or {}).get("name", "") + "(" + str((call.get("function") or {}).get("arguments"))
             for call in message.get("tool_calls") or []]
    return orjson.dumps([message.get("role"), _text(message.get("content")), calls])


def message_tokens(message: dict[str, Any]) -> int:
    calls = "".join(str((call.get("function") or {}).get("arguments") or "")
                    for call in message.get("tool_calls") or [])
    return (len(_text(message.get("content"))) + len(calls)) // CHARS_PER_TOKEN + TEMPLATE_TOKENS


def prefixes(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(key, tokens) of each prefix of `messages`, shortest first."""
    out, key, tokens = [], 0, 0
    for message in messages:
        key = zlib.crc32(_canonical(message), key)
        tokens += message_tokens(message)
        out.append((key, tokens))
    return out


def answer_message(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, output_tokens: int,
                   call_id: str) -> dict[str, Any]:
    """The assistant message of this turn: a tool call while the row wants more turns, else the final text."""
    first_user = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    wanted = int(found.group(1)) if (found := _TURNS.search(first_user)) else 1
    done_turns = sum(1 for m in messages if m.get("role") == "tool")
    text = _WORD * max(output_tokens - TEMPLATE_TOKENS, 0)
    if tools and done_turns < wanted - 1:
        city = found.group(1).strip() if (found := _CITY.search(first_user)) else "Paris"
        name = (tools[0].get("function") or {}).get("name", "get_weather")
        call = {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": orjson.dumps({"city": city}).decode()}}
        return {"role": "assistant", "content": text, "tool_calls": [call]}
    return {"role": "assistant", "content": text}


def sim_request(body: dict[str, Any], workload: Workload, call_id: str) -> tuple[SimRequest, dict[str, Any]]:
    """The engine's request for a chat completion body, and the assistant message it will answer. The output length
    is drawn from the conversation (the same conversation gets the same length on any replica), cut at the
    request's max_tokens; the conversation with that answer is cached when it finishes."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages must be a non-empty list of objects")
    found = prefixes(messages)
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or workload.max_tokens
    output = min(int(max_tokens), workload.output_tokens_for(found[-1][0]))
    message = answer_message(messages, body.get("tools"), output, call_id)
    done_key = zlib.crc32(_canonical(message), found[-1][0])
    return SimRequest(prompt_tokens=found[-1][1], output_tokens=output, prefixes=found, done_key=done_key), message


def completion_body(body: dict[str, Any], message: dict[str, Any], request: SimRequest, done: Completion,
                    model: str, number: int) -> dict[str, Any]:
    """The Chat Completions reply, with token ids and logprobs when the request asked vLLM for them."""
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    finish = ("length" if max_tokens and done.output_tokens >= int(max_tokens)
              else "tool_calls" if "tool_calls" in message else "stop")
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    reply: dict[str, Any] = {
        "id": f"chatcmpl-{number}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": request.prompt_tokens, "completion_tokens": done.output_tokens,
                  "total_tokens": request.prompt_tokens + done.output_tokens,
                  "prompt_tokens_details": {"cached_tokens": done.cached_tokens}},
    }
    if body.get("return_token_ids"):
        reply["prompt_token_ids"] = list(range(request.prompt_tokens))
        choice["token_ids"] = list(range(done.output_tokens))
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": _WORD, "logprob": -0.5}] * done.output_tokens}
    return reply

"""What a simulated replica makes of a Chat Completions request, and the reply it sends.

The prompt is the chat template's rendering of the messages (tokens.py), so the prefix cache and the token ids a
caller asks for are the ones `/tokenize` and `/v1/completions` use too. The answer plays the weather task
(benchmarks/perf/stub_chat.py) over several turns: a row whose first user message says `[turns=N]` gets a
`get_weather` call for the city it names on each of its first N-1 turns (with the drawn text before it), then text;
the text of every answer is as long as the drawn output, so the bytes our stack carries are real.
"""

import re
import time
from typing import Any

import orjson

from benchmarks.fleet.generation import Generation, plan, usage
from benchmarks.fleet.replica import Completion
from benchmarks.fleet.tokens import content_text, render
from benchmarks.fleet.workload import Workload

_TURNS = re.compile(r"\[turns=(\d+)\]")
_CITY = re.compile(r"weather in ([A-Za-z ]+)\?")


def answer_message(messages: list[dict[str, Any]], tools: Any, text: str, call_id: str) -> dict[str, Any]:
    """The assistant message of this turn: a tool call while the row wants more turns, else the final text."""
    first_user = next((content_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    wanted = int(found.group(1)) if (found := _TURNS.search(first_user)) else 1
    done_turns = sum(1 for m in messages if m.get("role") == "tool")
    if isinstance(tools, list) and tools and done_turns < wanted - 1:
        city = found.group(1).strip() if (found := _CITY.search(first_user)) else "Paris"
        name = (tools[0].get("function") or {}).get("name", "get_weather") if isinstance(tools[0], dict) else ""
        call = {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": orjson.dumps({"city": city}).decode()}}
        return {"role": "assistant", "content": text, "tool_calls": [call]}
    return {"role": "assistant", "content": text}


def sim_request(body: dict[str, Any], workload: Workload, call_id: str, block: int) -> tuple[Generation,
                                                                                           dict[str, Any]]:
    """The generation for a chat completion body, and the assistant message it answers with."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages must be a non-empty list of objects")
    generation = plan(render(messages, add_generation_prompt=True),
                      body.get("max_tokens") or body.get("max_completion_tokens"), workload, block)
    return generation, answer_message(messages, body.get("tools"), generation.text, call_id)


def completion_body(body: dict[str, Any], message: dict[str, Any], generation: Generation, done: Completion,
                    model: str, number: int) -> dict[str, Any]:
    """The Chat Completions reply, with token ids and logprobs when the request asked vLLM for them."""
    finish = "tool_calls" if "tool_calls" in message else "stop" if generation.stopped else "length"
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    reply: dict[str, Any] = {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": int(time.time()),
                             "model": model, "choices": [choice], "usage": usage(generation, done)}
    if body.get("return_token_ids"):
        reply["prompt_token_ids"] = generation.prompt_ids
        choice["token_ids"] = generation.generated_ids
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": "tok", "logprob": -0.5}] * len(generation.generated_ids)}
    return reply

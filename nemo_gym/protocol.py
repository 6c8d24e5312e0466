"""The one place for OpenAI Responses API / Chat Completions shapes and the conversions between them.

Bodies travel as plain dicts (decoded by orjson) for speed; this module knows their fields. Model servers speak the
Responses API to agents and Chat Completions to vLLM, so both directions live here and nowhere else.
"""

import os
import time
from typing import Any

import orjson

# Sent by the agent on every call that belongs to one rollout: resources servers key their per-rollout state on it
# and model servers use it to keep a rollout on one vLLM replica.
SESSION_HEADER = "x-ng-session-id"

# Training data attached to the last output item of each generation (NeMo Gym names).
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
# Per-request switch (ours, not OpenAI's) asking a vllm_model server for those fields.
RETURN_TOKENS_PARAM = "return_token_id_information"
# Per-request limits of a trainer (ours, NeMo RL's names): the agent makes at most `max_rollout_turns` model calls
# in the rollout, and vllm_model keeps every prompt + generation within `max_total_sequence_length` tokens.
MAX_TURNS_PARAM = "max_rollout_turns"
MAX_SEQ_LEN_PARAM = "max_total_sequence_length"
_OUR_PARAMS = frozenset({RETURN_TOKENS_PARAM, MAX_TURNS_PARAM, MAX_SEQ_LEN_PARAM})
# How an agent's loop ended (ours), on the Responses object an agent returns for a rollout, NeMo RL's meanings:
# "terminated" (the environment ended the episode: the model answered without tool calls, or a step said so),
# "max_turns" (the turn limit stopped an episode that had not ended), "truncated" (a generation had no room left, or
# was cut with tool calls pending, and nothing could follow it).
ROLLOUT_END_FIELD = "rollout_end"
TERMINATED, MAX_TURNS, TRUNCATED = "terminated", "max_turns", "truncated"

# Create params that are converted below, or have no Chat Completions counterpart (vLLM would reject or misread
# them). Every other key passes through to vLLM unchanged: seed, top_k, stop, repetition_penalty, ...
_NOT_FORWARDED = _OUR_PARAMS | frozenset(
    {
        "input", "instructions", "tools", "tool_choice", "max_output_tokens", "model", "stream", "store",
        "metadata", "previous_response_id", "reasoning", "text", "truncation", "include", "background",
        "prompt", "prompt_cache_key", "safety_identifier", "service_tier", "conversation", "max_tool_calls",
    }
)
# Text content-part types that chat templates understand as plain text.
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def _random_hex() -> str:
    return os.urandom(16).hex()  # uuid4's hex without building a UUID (a fourth of its CPU)


def new_id(prefix: str) -> str:
    return f"{prefix}_{_random_hex()}"  # one per reply and output item


def new_session_id() -> str:
    """A rollout's session id, sent as SESSION_HEADER: one per rollout."""
    return _random_hex()


# --- Responses -> Chat Completions -------------------------------------------------------------------------------


def content_to_chat(content: Any) -> str | list[dict[str, Any]]:
    """Message content as Chat Completions wants it: a plain string when every part is text.

    Small models' chat templates only handle string content, so text parts are joined rather than kept as a list.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": part.get("text") or part.get("refusal") or ""})
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id")
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": part.get("detail", "auto")}})
        else:
            raise ValueError(f"unsupported content part type {kind!r}")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    arguments = item.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments).decode()
    return {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": arguments}}


def input_to_messages(input_: str | list[dict[str, Any]], instructions: str | None = None) -> list[dict[str, Any]]:
    """Responses `input` (+ `instructions`) as a chat message list.

    Function calls join the assistant message just before them: one model turn that produced text and tool calls
    (or several tool calls) was one assistant message, and chat templates expect it back that way.
    """
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(input_, str):
        messages.append({"role": "user", "content": input_})
        return messages
    for item in input_:
        kind = item.get("type", "message")
        if kind == "message":
            role = item["role"]
            # "developer" is the Responses name for the system role; chat templates only know "system".
            role = "system" if role == "developer" else role
            messages.append({"role": role, "content": content_to_chat(item.get("content"))})
        elif kind == "function_call":
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                messages.append(last)
            last.setdefault("tool_calls", []).append(_tool_call(item))
        elif kind == "function_call_output":
            output = item.get("output", "")
            content = output if isinstance(output, str) else orjson.dumps(output).decode()
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": content})
        elif kind == "reasoning":
            continue  # earlier reasoning is not re-fed: chat templates drop it and it would only cost context
        else:
            raise ValueError(f"unsupported input item type {kind!r}")
    return messages


def tools_to_chat(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses function tools (flat) as chat tools (nested under `function`)."""
    out = []
    for tool in tools:
        if tool.get("type") != "function":
            raise ValueError(f"only function tools are supported, got {tool.get('type')!r}")
        if "function" in tool:  # already in chat shape
            out.append(tool)
            continue
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        if tool.get("description"):
            function["description"] = tool["description"]
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def tool_choice_to_chat(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """"auto"/"none"/"required" are the same in both APIs; a named function nests under `function` in chat."""
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def to_chat_request(params: dict[str, Any], model: str) -> dict[str, Any]:
    """A Chat Completions request for Responses create params, addressed to `model`.

    Sampling params that Chat Completions shares (temperature, top_p, seed, and vLLM extras such as top_k) pass
    through unchanged; our token-id fields on input items are dropped because only known fields are copied.
    """
    request = {k: v for k, v in params.items() if k not in _NOT_FORWARDED and v is not None}
    request["model"] = model
    request["messages"] = input_to_messages(params.get("input", []), params.get("instructions"))
    if params.get("tools"):
        request["tools"] = tools_to_chat(params["tools"])
        if params.get("tool_choice") is not None:
            request["tool_choice"] = tool_choice_to_chat(params["tool_choice"])
    if params.get("max_output_tokens") is not None:
        request["max_tokens"] = params["max_output_tokens"]
    return request


def strip_token_info(params: dict[str, Any]) -> dict[str, Any]:
    """Create params without our token-id fields and per-request params, for endpoints that reject unknown
    fields."""
    cleaned = {k: v for k, v in params.items() if k not in _OUR_PARAMS}
    if isinstance(cleaned.get("input"), list):
        cleaned["input"] = [{k: v for k, v in item.items() if k not in TOKEN_FIELDS} for item in cleaned["input"]]
    return cleaned


# --- Chat Completions -> Responses -------------------------------------------------------------------------------


def _message_item(text: str) -> dict[str, Any]:
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _function_call_item(tool_call: dict[str, Any]) -> dict[str, Any]:
    function = tool_call.get("function") or {}
    return {
        "id": new_id("fc"),
        "type": "function_call",
        "call_id": tool_call.get("id") or new_id("call"),
        "name": function.get("name", ""),
        "arguments": function.get("arguments") or "",
        "status": "completed",
    }


def message_to_output(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Output items for one assistant chat message: reasoning, then text, then function calls (model order)."""
    items: list[dict[str, Any]] = []
    # vLLM's reasoning parsers fill `reasoning` (newer) or `reasoning_content` (older).
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        summary = [{"type": "summary_text", "text": reasoning}]
        items.append({"id": new_id("rs"), "type": "reasoning", "summary": summary})
    tool_calls = message.get("tool_calls") or []
    text = message.get("content") or ""
    # A message item even for empty text when there is nothing else, so every generation has an item to carry
    # its token ids and `output_text` always finds the answer.
    if text or not tool_calls:
        items.append(_message_item(text))
    items.extend(_function_call_item(tc) for tc in tool_calls)
    return items


def _echo(params: dict[str, Any]) -> dict[str, Any]:
    """The request fields a Responses object repeats back."""
    return {
        "instructions": params.get("instructions"),
        "tools": params.get("tools") or [],
        "tool_choice": params.get("tool_choice", "auto"),
        "temperature": params.get("temperature"),
        "top_p": params.get("top_p"),
        "max_output_tokens": params.get("max_output_tokens"),
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "metadata": params.get("metadata") or {},
    }


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    input_tokens = int(usage.get("prompt_tokens") or 0)
    output_tokens = int(usage.get("completion_tokens") or 0)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(usage.get("total_tokens") or input_tokens + output_tokens),
    }


def token_info_from_chat(completion: dict[str, Any]) -> dict[str, Any]:
    """Prompt and generation token ids and per-token logprobs from a vLLM chat completion (`return_token_ids`)."""
    choice = completion["choices"][0]
    logprobs = (choice.get("logprobs") or {}).get("content") or []
    return {
        "prompt_token_ids": completion.get("prompt_token_ids") or [],
        "generation_token_ids": choice.get("token_ids") or [],
        "generation_log_probs": [entry["logprob"] for entry in logprobs],
    }


def _response(output: list[dict[str, Any]], truncated: bool, completion: dict[str, Any],
              params: dict[str, Any]) -> dict[str, Any]:
    """The Responses envelope around `output`; a `length` finish becomes `status: incomplete`, on the response and
    on its items, so agents can tell a cut-off answer from a finished one, and a rollout's reader which of its
    generations was cut."""
    if truncated:
        for item in output:
            if "status" in item:
                item["status"] = "incomplete"
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(completion.get("created") or time.time()),
        "model": completion.get("model") or params.get("model"),
        "status": "incomplete" if truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "error": None,
        "output": output,
        "usage": _usage(completion.get("usage")),
        **_echo(params),
    }


def chat_to_response(
    completion: dict[str, Any], params: dict[str, Any], *, with_token_info: bool = False
) -> dict[str, Any]:
    """A Responses object for a chat completion of the request `params`."""
    choice = completion["choices"][0]
    output = message_to_output(choice.get("message") or {})
    if with_token_info:
        output[-1].update(token_info_from_chat(completion))
    return _response(output, choice.get("finish_reason") == "length", completion, params)


def text_completion_to_response(completion: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A Responses object for a token-prompt `/v1/completions` answer (`return_token_ids`, `logprobs: 0`): one
    assistant message carrying the prompt and generated ids exactly as vLLM processed them."""
    choice = completion["choices"][0]
    item = _message_item(choice.get("text") or "")
    item.update({
        "prompt_token_ids": choice.get("prompt_token_ids") or [],
        "generation_token_ids": choice.get("token_ids") or [],
        "generation_log_probs": list((choice.get("logprobs") or {}).get("token_logprobs") or []),
    })
    return _response([item], choice.get("finish_reason") == "length", completion, params)


def exact_token_prefix(input_: Any) -> tuple[int, list[int], list[int]] | None:
    """(index, tokens so far, the generation) of the last input item carrying token ids, or None: the exact
    sequence an earlier turn of this conversation ended with (prompt + generation)."""
    if not isinstance(input_, list):
        return None
    for index in range(len(input_) - 1, -1, -1):
        info = token_info(input_[index]) if isinstance(input_[index], dict) else None
        if info is not None:
            generated = list(info["generation_token_ids"] or [])
            return index, list(info["prompt_token_ids"] or []) + generated, generated
    return None


def incomplete_response(params: dict[str, Any], model: str, reason: str = "max_output_tokens") -> dict[str, Any]:
    """An empty, incomplete Responses object: the answer for a prompt that no longer fits the context.

    Long multi-turn rollouts reach the context limit as a matter of course; that ends the rollout, it is not an
    infrastructure failure.
    """
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "incomplete",
        "incomplete_details": {"reason": reason},
        "error": None,
        "output": [],
        "usage": None,
        **_echo(params),
    }


# --- Helpers for agent loops -------------------------------------------------------------------------------------


def function_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The function_call items of a response, in the order the model made them."""
    return [item for item in response.get("output") or [] if item.get("type") == "function_call"]


def function_call_output(call_id: str, output: Any) -> dict[str, Any]:
    """The input item that answers one function call; non-string outputs are sent as JSON."""
    text = output if isinstance(output, str) else orjson.dumps(output).decode()
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def output_text(response: dict[str, Any]) -> str:
    """All assistant output text of a response, joined (what the SDK's `response.output_text` gives)."""
    return "".join(
        part.get("text", "")
        for item in response.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    )


def final_message_text(response: dict[str, Any]) -> str:
    """Text of the last message item of a response: earlier messages are steps on the way, not the answer."""
    messages = [item for item in response.get("output") or [] if item.get("type") == "message"]
    return output_text({"output": messages[-1:]})


def token_info(item: dict[str, Any]) -> dict[str, Any] | None:
    """The token-id fields of an output item, or None when it carries none."""
    if "generation_token_ids" not in item:
        return None
    return {k: item.get(k) for k in TOKEN_FIELDS}

"""Responses <-> Chat Completions conversions, both ways."""

import pytest

from nemo_gym import protocol
from tests.helpers.requirements import require_module

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}


def test_string_input_instructions_and_sampling_params() -> None:
    chat = protocol.to_chat_request(
        {
            "input": "What is 2+3?",
            "instructions": "Be brief.",
            "temperature": 0.7,
            "top_p": 0.9,
            "max_output_tokens": 32,
            "seed": 7,
            "top_k": 5,
            "store": False,
            "metadata": {"a": "b"},
            "model": "ignored",
        },
        "served",
    )
    assert chat == {
        "model": "served",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}],
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 32,
        "seed": 7,
        "top_k": 5,
    }


def test_content_parts_roles_and_token_fields_stripped() -> None:
    messages = protocol.input_to_messages(
        [
            {"role": "developer", "content": [{"type": "input_text", "text": "sys"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                             {"type": "input_text", "text": "b"}]},
            {
                "type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
                "prompt_token_ids": [1, 2], "generation_token_ids": [3], "generation_log_probs": [-0.1],
            },
            {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                         {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
        ]
    )
    assert messages[:3] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "ok"},
    ]
    assert messages[3]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA",
                                                                            "detail": "auto"}}


def test_multi_turn_function_calls_merge_into_one_assistant_message() -> None:
    chat = protocol.to_chat_request(
        {
            "input": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}',
                 "generation_token_ids": [9]},
                {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": {"city": "Rome"}},
                protocol.function_call_output("c1", "sunny"),
                protocol.function_call_output("c2", {"temp": 20}),
                {"type": "function_call", "call_id": "c3", "name": "get_weather", "arguments": "{}"},
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": True,
        },
        "m",
    )
    call = lambda cid, args: {"id": cid, "type": "function", "function": {"name": "get_weather", "arguments": args}}
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.",
         "tool_calls": [call("c1", '{"city": "Paris"}'), call("c2", '{"city":"Rome"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": '{"temp":20}'},
        {"role": "assistant", "content": None, "tool_calls": [call("c3", "{}")]},
    ]
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER_TOOL["parameters"], "description": "Weather for a city",
        "strict": True}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is True


def test_unsupported_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="web_search"):
        protocol.tools_to_chat([{"type": "web_search"}])
    with pytest.raises(ValueError, match="computer_call"):
        protocol.input_to_messages([{"type": "computer_call"}])


def _completion(message: dict, finish_reason: str = "stop", **extra) -> dict:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason,
                     **extra.pop("choice", {})}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15},
        **extra,
    }


def test_text_completion_becomes_completed_response_echoing_params() -> None:
    params = {"input": "hi", "temperature": 0.5, "top_p": 1.0, "max_output_tokens": 16, "tools": [WEATHER_TOOL]}
    response = protocol.chat_to_response(_completion({"content": "Hello!"}), params)
    assert response["object"] == "response" and response["id"].startswith("resp_")
    assert response["status"] == "completed" and response["incomplete_details"] is None
    assert response["created_at"] == 1700000000 and response["model"] == "m"
    (item,) = response["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["status"] == "completed"
    assert item["content"] == [{"type": "output_text", "text": "Hello!", "annotations": []}]
    assert response["usage"]["input_tokens"] == 11 and response["usage"]["output_tokens"] == 4
    assert response["usage"]["total_tokens"] == 15
    assert (response["temperature"], response["top_p"], response["max_output_tokens"]) == (0.5, 1.0, 16)
    assert response["tools"] == [WEATHER_TOOL] and response["tool_choice"] == "auto"
    assert response["parallel_tool_calls"] is True
    assert protocol.output_text(response) == "Hello!"
    assert protocol.function_calls(response) == []
    assert not any(f in item for f in protocol.TOKEN_FIELDS)


def test_tool_calls_become_function_call_items_and_round_trip() -> None:
    tool_calls = [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}},
    ]
    response = protocol.chat_to_response(
        _completion({"content": None, "tool_calls": tool_calls}, "tool_calls"), {"input": "x"}
    )
    calls = protocol.function_calls(response)
    assert [c["call_id"] for c in calls] == ["call_a", "call_b"]
    assert calls[0]["name"] == "get_weather" and calls[0]["arguments"] == '{"city":"Paris"}'
    assert calls[0]["id"].startswith("fc_") and calls[0]["status"] == "completed"
    assert len(response["output"]) == 2  # no empty message item next to the calls
    # Feeding the output back gives the chat history the model produced.
    follow_up = [*response["output"], protocol.function_call_output("call_a", "sunny")]
    messages = protocol.input_to_messages(follow_up)
    assert messages[0]["role"] == "assistant" and messages[0]["tool_calls"] == tool_calls
    assert messages[1] == {"role": "tool", "tool_call_id": "call_a", "content": "sunny"}


def test_length_finish_is_incomplete() -> None:
    response = protocol.chat_to_response(_completion({"content": "cut of"}, "length"), {"input": "x"})
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert protocol.output_text(response) == "cut of"
    # Its items too: an agent's rollout keeps every generation's items, and a reader tells the cut one by them.
    assert [item["status"] for item in response["output"]] == ["incomplete"]
    completion = {"choices": [{"text": "cut", "token_ids": [5], "finish_reason": "length",
                               "logprobs": {"token_logprobs": [-0.5]}, "prompt_token_ids": [1]}]}
    assert protocol.text_completion_to_response(completion, {"input": "x"})["output"][0]["status"] == "incomplete"


def test_incomplete_response_is_empty_and_well_formed() -> None:
    response = protocol.incomplete_response({"input": "x", "temperature": 0.2}, "m")
    assert response["status"] == "incomplete" and response["output"] == []
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["temperature"] == 0.2 and protocol.output_text(response) == ""


def test_token_info_goes_on_last_item_of_generation() -> None:
    completion = _completion(
        {"content": "Hi", "reasoning_content": "greet",
         "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        choice={"token_ids": [5, 6, 7], "logprobs": {"content": [{"token": t, "logprob": -0.5 * i, "bytes": [],
                                                                    "top_logprobs": []}
                                                                   for i, t in enumerate("abc")]}},
        prompt_token_ids=[1, 2, 3, 4],
    )
    response = protocol.chat_to_response(completion, {"input": "x"}, with_token_info=True)
    assert [i["type"] for i in response["output"]] == ["reasoning", "message", "function_call"]
    assert response["output"][0]["summary"][0]["text"] == "greet"
    carriers = [i for i in response["output"] if protocol.token_info(i)]
    assert carriers == [response["output"][-1]]
    assert protocol.token_info(carriers[0]) == {
        "prompt_token_ids": [1, 2, 3, 4], "generation_token_ids": [5, 6, 7], "generation_log_probs": [0.0, -0.5, -1.0],
    }
    cleaned = protocol.strip_token_info({"input": response["output"], "return_token_id_information": True})
    assert "return_token_id_information" not in cleaned
    assert not any(f in item for item in cleaned["input"] for f in protocol.TOKEN_FIELDS)


def test_response_validates_against_openai_sdk_model() -> None:
    openai_types = require_module("openai.types.responses")
    tool_calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    for completion in (_completion({"content": "Hi", "tool_calls": tool_calls}), _completion({"content": ""})):
        response = protocol.chat_to_response(completion, {"input": "x", "tools": [WEATHER_TOOL]})
        parsed = openai_types.Response.model_validate(response)
        assert parsed.output_text == protocol.output_text(response)
    openai_types.Response.model_validate(protocol.incomplete_response({"input": "x"}, "m"))

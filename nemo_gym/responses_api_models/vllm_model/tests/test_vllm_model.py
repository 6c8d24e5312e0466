"""vllm_model through a real `ng_run`: against stub chat-completions replicas (routing, pass-through, faults) and,
marked `vllm`, against a real vLLM server."""

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from nemo_gym import protocol
from tests.helpers.stack import REPO_ROOT, free_port, running_stack

CONFIG = REPO_ROOT / "configs" / "vllm_model.yaml"
# vLLM 0.32's 400 bodies (notes/vllm_findings.md): prompt over the limit, prompt exactly at it, and a config error.
ERRORS_400 = {
    "TOO LONG": "This model's maximum context length is 2048 tokens. However, your prompt contains at least 2049 input "
                "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the "
                "input prompt. (parameter=input_tokens, value=2049)",
    "AT LIMIT": "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
    "HUGE MAX": "max_tokens=5000 cannot be greater than max_model_len=2048. Please request fewer output tokens. "
                "(parameter=max_tokens, value=5000)",
}

class StubVLLM:
    """A chat-completions endpoint that records what it receives and answers according to the last message."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"]),
                                Route("/v1/responses", self.responses, methods=["POST"]),
                                Route("/v1/models", self.models)])  # a replica marked down is probed here
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append({"body": body, "headers": dict(request.headers)})
        last = body["messages"][-1]
        if last["content"] in ERRORS_400:
            error = {"message": ERRORS_400[last["content"]], "type": "BadRequestError", "param": None, "code": 400}
            return JSONResponse({"error": error}, status_code=400)
        if last["content"] == "FAIL":
            return JSONResponse({"error": {"message": "engine dead"}}, status_code=500)
        message: dict[str, Any] = {"role": "assistant", "content": f"echo: {last['content']}"}
        if body.get("tools") and last["role"] == "user":
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "chatcmpl-tool-1", "type": "function",
                 "function": {"name": body["tools"][0]["function"]["name"], "arguments": '{"city": "Paris"}'}}]}
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "stop"}
        completion = {"id": "chatcmpl-x", "object": "chat.completion", "created": int(time.time()),
                      "model": body["model"], "choices": [choice],
                      "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}
        if body.get("return_token_ids"):
            completion["prompt_token_ids"] = [1, 2, 3, 4, 5, 6, 7]
            choice["token_ids"] = [10, 11, 12]
            choice["logprobs"] = {"content": [{"token": "t", "logprob": -0.25, "bytes": [116], "top_logprobs": []}] * 3}
        return JSONResponse(completion)

    async def models(self, request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})

    async def responses(self, request: Request) -> JSONResponse:
        """Stands in for an OpenAI Responses endpoint (openai_model passes requests through)."""
        body = await request.json()
        self.requests.append({"body": body, "headers": dict(request.headers)})
        return JSONResponse(protocol.incomplete_response(body, body["model"]))

    def __enter__(self) -> "StubVLLM":
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def stubs() -> Iterator[tuple[StubVLLM, StubVLLM]]:
    with StubVLLM() as a, StubVLLM() as b:
        yield a, b


@pytest.fixture(scope="module")
def model_url(stubs: tuple[StubVLLM, StubVLLM], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    urls = ",".join(s.url for s in stubs)
    args = [f"+config_paths=[{CONFIG}]", f"+policy_base_url=[{urls}]", "+policy_api_key=sk-stub-key-123",
            "+policy_model_name=stub-model"]
    with running_stack(args, tmp_path_factory.mktemp("stack")) as stack:
        yield stack.url("policy_model")


@pytest.fixture(autouse=True)
def clear(stubs: tuple[StubVLLM, StubVLLM]) -> None:
    for stub in stubs:
        stub.requests.clear()


def post(url: str, body: dict[str, Any], session: str | None = None, path: str = "/v1/responses") -> httpx.Response:
    headers = {protocol.SESSION_HEADER: session} if session else {}
    return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30, trust_env=False)


def test_sessions_stick_to_one_replica_and_others_round_robin(model_url: str, stubs) -> None:
    for _ in range(4):
        assert post(model_url, {"input": "hi"}).status_code == 200
    assert [len(s.requests) for s in stubs] == [2, 2]
    for i in range(12):
        for _ in range(3):
            assert post(model_url, {"input": f"rollout-{i}"}, session=f"rollout-{i}").status_code == 200
    seen: dict[str, set[int]] = {}
    for index, stub in enumerate(stubs):
        for req in stub.requests[2:]:
            seen.setdefault(req["body"]["messages"][-1]["content"], set()).add(index)
    assert len(seen) == 12 and all(len(replicas) == 1 for replicas in seen.values())
    assert set().union(*seen.values()) == {0, 1}  # sessions still spread over both replicas


def test_sampling_params_model_and_key_pass_through(model_url: str, stubs) -> None:
    body = {"input": "hello", "instructions": "sys", "temperature": 0.3, "top_p": 0.8, "max_output_tokens": 5,
            "seed": 1234, "top_k": 3, "model": "whatever"}
    response = post(model_url, body).json()
    assert response["status"] == "completed" and protocol.output_text(response) == "echo: hello"
    assert (response["temperature"], response["top_p"], response["max_output_tokens"]) == (0.3, 0.8, 5)
    assert response["usage"]["input_tokens"] == 7 and response["usage"]["output_tokens"] == 3
    (sent,) = [r for s in stubs for r in s.requests]
    assert sent["body"]["model"] == "stub-model" and sent["body"]["seed"] == 1234 and sent["body"]["top_k"] == 3
    assert (sent["body"]["temperature"], sent["body"]["top_p"], sent["body"]["max_tokens"]) == (0.3, 0.8, 5)
    assert sent["body"]["messages"][0] == {"role": "system", "content": "sys"}
    assert sent["headers"]["authorization"] == "Bearer sk-stub-key-123"
    assert "return_token_ids" not in sent["body"] and "logprobs" not in sent["body"]
    assert not any(f in item for item in response["output"] for f in protocol.TOKEN_FIELDS)


@pytest.mark.parametrize("prompt", ["TOO LONG", "AT LIMIT"])
def test_context_length_rejection_is_an_incomplete_response(model_url: str, prompt: str) -> None:
    reply = post(model_url, {"input": prompt, "temperature": 0.5})
    assert reply.status_code == 200
    response = reply.json()
    assert response["status"] == "incomplete" and response["output"] == []
    assert response["incomplete_details"] == {"reason": "max_output_tokens"} and response["temperature"] == 0.5


def test_other_400_stays_an_error(model_url: str, stubs) -> None:
    reply = post(model_url, {"input": "HUGE MAX", "max_output_tokens": 5000})
    assert reply.status_code == 502 and reply.json()["error"]["failure_class"] == "http_4xx"
    assert "max_model_len" in reply.json()["error"]["message"]
    assert sum(len(s.requests) for s in stubs) == 1  # a 4xx is not retried


def test_upstream_5xx_on_every_replica_is_reported_after_one_call_on_each(model_url: str, stubs) -> None:
    reply = post(model_url, {"input": "FAIL"}, session="s")
    assert reply.status_code == 502 and reply.json()["error"]["failure_class"] == "http_5xx"
    # The failed call went to the other replica once (routing.py), and no further: the rollout's caller owns the
    # retry budget (docs/architecture.md, "Retry budget").
    assert [len(s.requests) for s in stubs] == [1, 1]


def test_a_replica_whose_metrics_cannot_be_read_reports_why_and_no_load(model_url: str, stubs) -> None:
    reply = httpx.get(f"{model_url}/engine_load", timeout=30, trust_env=False)
    assert reply.status_code == 200
    # The stubs serve no /metrics: each replica's entry says so, and carries no load for the automatic level to use.
    assert reply.json()["replicas"] == [
        {"endpoint": stub.url, "error": f"http_4xx: HTTP 404 from http://127.0.0.1:{stub.port}/metrics"}
        for stub in stubs]


def test_token_ids_per_request(model_url: str, stubs) -> None:
    response = post(model_url, {"input": "hi", protocol.RETURN_TOKENS_PARAM: True}).json()
    (sent,) = [r["body"] for s in stubs for r in s.requests]
    assert sent["return_token_ids"] is True and sent["logprobs"] is True
    assert protocol.RETURN_TOKENS_PARAM not in sent
    assert protocol.token_info(response["output"][-1]) == {
        "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7], "generation_token_ids": [10, 11, 12],
        "generation_log_probs": [-0.25, -0.25, -0.25]}


def test_tool_call_round_trip(model_url: str, stubs) -> None:
    tool = {"type": "function", "name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    first = post(model_url, {"input": "Weather in Paris?", "tools": [tool]}, session="t").json()
    (call,) = protocol.function_calls(first)
    assert call["name"] == "get_weather" and call["arguments"] == '{"city": "Paris"}'
    follow = [{"role": "user", "content": "Weather in Paris?"}, *first["output"],
              protocol.function_call_output(call["call_id"], "sunny")]
    second = post(model_url, {"input": follow, "tools": [tool]}, session="t").json()
    assert protocol.output_text(second) == "echo: sunny"
    sent = [r["body"] for s in stubs for r in s.requests][-1]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["messages"][1]["tool_calls"][0]["id"] == call["call_id"]
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny"}


def test_chat_completions_passthrough(model_url: str, stubs) -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": "yo"}], "seed": 5}
    completion = post(model_url, body, path="/v1/chat/completions").json()
    assert completion["choices"][0]["message"]["content"] == "echo: yo" and completion["model"] == "stub-model"
    (sent,) = [r["body"] for s in stubs for r in s.requests]
    assert sent["seed"] == 5


def test_invalid_request_is_a_400(model_url: str) -> None:
    reply = post(model_url, {"input": "x", "tools": [{"type": "web_search"}]})
    assert reply.status_code == 400 and "web_search" in reply.json()["error"]["message"]



def test_openai_model_passes_responses_through(stubs, tmp_path: Path) -> None:
    args = [f"+config_paths=[{REPO_ROOT / 'configs' / 'openai_model.yaml'}]", f"+policy_base_url={stubs[0].url}",
            "+policy_api_key=sk-openai-secret-9", "+policy_model_name=gpt-test"]
    with running_stack(args, tmp_path) as stack:
        item = {"type": "message", "role": "assistant", "content": "a", "generation_token_ids": [1]}
        body = {"input": [item], "temperature": 0.1, protocol.RETURN_TOKENS_PARAM: True,
                protocol.MAX_TURNS_PARAM: 3, protocol.MAX_SEQ_LEN_PARAM: 512}  # ours: OpenAI would reject them
        reply = post(stack.url("policy_model"), body)
        logs = "".join(p.read_text() for p in (tmp_path / "ng_logs").rglob("*.log"))
    assert reply.status_code == 200 and reply.json()["model"] == "gpt-test"
    (sent,) = stubs[0].requests
    assert sent["headers"]["authorization"] == "Bearer sk-openai-secret-9"
    assert sent["body"] == {"input": [{"type": "message", "role": "assistant", "content": "a"}], "temperature": 0.1,
                            "model": "gpt-test"}
    assert logs and "sk-openai-secret-9" not in logs

@pytest.fixture(scope="module")
def real_model_url(vllm_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    args = [f"+config_paths=[{CONFIG}]", f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
            f"+policy_model_name={vllm_server.model}"]
    with running_stack(args, tmp_path_factory.mktemp("real")) as stack:
        yield stack.url("policy_model")


@pytest.mark.vllm
def test_real_vllm_answer_with_token_ids(real_model_url: str) -> None:
    body = {"input": [{"role": "user", "content": "What is 2 + 3?"}], "temperature": 0.0,
            "max_output_tokens": 24, "seed": 1, protocol.RETURN_TOKENS_PARAM: True}
    response = post(real_model_url, body).json()
    assert "5" in protocol.output_text(response)
    info = protocol.token_info(response["output"][-1])
    assert len(info["prompt_token_ids"]) == response["usage"]["input_tokens"] > 0
    assert len(info["generation_token_ids"]) == len(info["generation_log_probs"]) == response["usage"]["output_tokens"]
    assert all(lp <= 0.0 for lp in info["generation_log_probs"])
    again = post(real_model_url, body).json()
    assert protocol.token_info(again["output"][-1])["generation_token_ids"] == info["generation_token_ids"]


@pytest.mark.vllm
def test_real_vllm_max_output_tokens_and_too_long_prompt(real_model_url: str) -> None:
    cut = post(real_model_url, {"input": "Write a long story about a dragon.", "max_output_tokens": 4}).json()
    assert cut["status"] == "incomplete" and cut["usage"]["output_tokens"] == 4
    reply = post(real_model_url, {"input": "hello " * 3000, "max_output_tokens": 8})
    assert reply.status_code == 200
    assert reply.json()["status"] == "incomplete" and reply.json()["output"] == []


@pytest.mark.vllm
def test_real_vllm_keeps_prompt_plus_generation_within_max_total_sequence_length(real_model_url: str) -> None:
    story = {"input": [{"role": "user", "content": "Write a long story about a dragon."}], "temperature": 0.0,
             "max_output_tokens": 24, protocol.RETURN_TOKENS_PARAM: True}
    free = post(real_model_url, story).json()
    prompt = protocol.token_info(free["output"][-1])["prompt_token_ids"]
    assert free["usage"]["output_tokens"] == 24  # uncapped, the story runs to max_output_tokens
    cap = len(prompt) + 8
    capped = post(real_model_url, {**story, protocol.MAX_SEQ_LEN_PARAM: cap}).json()  # the chat path
    info = protocol.token_info(capped["output"][-1])
    assert info["prompt_token_ids"] == prompt and len(info["generation_token_ids"]) == 8
    assert capped["status"] == "incomplete"
    # A second turn continues the first's exact tokens (the token path); its cap counts those tokens too.
    follow = {**story, "input": [*story["input"], *capped["output"], {"role": "user", "content": "Go on."}]}
    second = protocol.token_info(post(real_model_url, follow).json()["output"][-1])
    room = 4
    capped_second = post(real_model_url, {**follow, protocol.MAX_SEQ_LEN_PARAM: len(second["prompt_token_ids"]) + room})
    info = protocol.token_info(capped_second.json()["output"][-1])
    assert info["prompt_token_ids"] == second["prompt_token_ids"] and len(info["generation_token_ids"]) == room
    # No room left: the empty incomplete answer of a full context, on either path, without calling vLLM to fail.
    for body, length in ((story, len(prompt)), (follow, len(second["prompt_token_ids"]))):
        full = post(real_model_url, {**body, protocol.MAX_SEQ_LEN_PARAM: length}).json()
        assert full["status"] == "incomplete" and full["output"] == []
    bad = post(real_model_url, {**story, protocol.MAX_SEQ_LEN_PARAM: "lots"})
    assert bad.status_code == 400 and protocol.MAX_SEQ_LEN_PARAM in bad.json()["error"]["message"]


@pytest.mark.vllm
def test_real_vllm_tool_call_round_trip(real_model_url: str) -> None:
    tool = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    body = {"input": "What is the weather in Paris?", "tools": [tool], "temperature": 0.0, "max_output_tokens": 64}
    # "required" makes vLLM constrain the output to the tools' schema, so the call is certain and well-formed.
    response = post(real_model_url, {**body, "tool_choice": "required"}).json()
    calls = protocol.function_calls(response)
    assert calls and all(c["name"] == "get_weather" and c["call_id"] for c in calls)
    assert "city" in json.loads(calls[0]["arguments"])
    follow = [{"role": "user", "content": body["input"]}, *response["output"]]
    follow += [protocol.function_call_output(c["call_id"], "sunny, 21 C") for c in calls]
    answer = post(real_model_url, {**body, "input": follow})
    assert answer.status_code == 200 and answer.json()["status"] in ("completed", "incomplete")

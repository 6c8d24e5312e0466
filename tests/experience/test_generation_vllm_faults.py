"""VllmHttpGeneration's requests and failures, against loopback stubs of the test's own (fault injection)."""

import asyncio
import time
from typing import Any

import orjson
import pytest

from nemo_gym.experience.errors import GenerationError
from nemo_gym.experience.generation import VllmHttpGeneration
from tests.experience.generation_support import LoopbackServer, closed_port_url, make_batch, unresponsive_url

CONFIG = {"model_name": "m", "max_new_tokens": 8, "max_seq_len": 20, "pad_token_id": 0, "temperature": 0.7,
          "top_p": 0.9, "top_k": 20, "stop_strings": ["END"], "stop_token_ids": [7]}


def answering(reply: Any, status: int = 200) -> Any:
    async def handler(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        return status, orjson.dumps(reply)

    return handler


def completion(token_ids: list[int], logprobs: list[float], finish_reason: str = "stop") -> dict[str, Any]:
    return {"choices": [{"token_ids": token_ids, "logprobs": {"token_logprobs": logprobs},
                         "finish_reason": finish_reason}]}


def test_request_carries_limits_sampling_stops_and_bearer_key() -> None:
    data = make_batch([[1] * 15, [1] * 5], pad_token_id=0, stop_strings=[["</a>"], None])
    with LoopbackServer(answering(completion([3, 4], [-0.5, -0.1], "length"))) as stub:
        with VllmHttpGeneration(CONFIG, stub.base_url, api_key="sekret") as backend:
            out = backend.generate(data)
            backend.generate(data.select_indices([1]), greedy=True)
            greedy_body = stub.requests[-1]["body"]
            assert "sekret" not in repr(backend)
    first, second = sorted(stub.requests[:2], key=lambda r: len(r["body"]["prompt"]), reverse=True)
    assert first["headers"]["Authorization"] == "Bearer sekret"
    assert first["body"]["prompt"] == [1] * 15 and first["body"]["max_tokens"] == 5  # max_seq_len 20 - 15
    assert second["body"]["max_tokens"] == 8
    assert first["body"]["stop"] == ["END", "</a>"] and second["body"]["stop"] == ["END"]
    assert first["body"]["include_stop_str_in_output"] is True
    assert (first["body"]["temperature"], first["body"]["top_p"], first["body"]["top_k"]) == (0.7, 0.9, 20)
    assert first["body"]["stop_token_ids"] == [7] and first["body"]["return_token_ids"] is True
    assert greedy_body["temperature"] == 0.0 and "top_k" not in greedy_body
    assert out["truncated"].tolist() == [True, True]
    assert out["output_ids"][1, :7].tolist() == [1, 1, 1, 1, 1, 3, 4]


def test_per_sample_max_new_tokens_caps_the_request() -> None:
    data = make_batch([[1, 2]], pad_token_id=0, max_new_tokens=[2])
    with LoopbackServer(answering(completion([3], [-0.5]))) as stub, VllmHttpGeneration(CONFIG, stub.base_url) as b:
        out = b.generate(data)
    assert stub.requests[0]["body"]["max_tokens"] == 2
    assert out["generation_lengths"].tolist() == [1] and out["truncated"].tolist() == [False]


@pytest.mark.parametrize(("reply", "status", "expected"), [
    ({"choices": []}, 200, r"sample 0: malformed reply from .* \(invalid_response\)"),
    (completion([3, 4], [-0.5]), 200, r"sample 0: .* returned 2 token ids but 1 log-probs \(invalid_response\)"),
    (completion([3], [-0.5], "abort"), 200, r"finished with 'abort'"),
    ({"error": "bad prompt"}, 400, r"sample 0: .*/completions failed after 1 attempt\(s\) \(http_4xx\)"),
])
def test_bad_replies_raise_generation_error(reply: Any, status: int, expected: str) -> None:
    with LoopbackServer(answering(reply, status)) as stub, VllmHttpGeneration(CONFIG, stub.base_url) as backend:
        with pytest.raises(GenerationError, match=expected) as failure:
            backend.generate(make_batch([[1, 2]], pad_token_id=0))
        assert stub.base_url in str(failure.value)


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_one_attempt_per_completion_unless_asked(max_attempts: int) -> None:
    """The caller holds the retry budget (the collector's group attempts): by default a 503 is not retried here."""
    with LoopbackServer(answering({"error": "busy"}, 503)) as stub, \
            VllmHttpGeneration(CONFIG, stub.base_url, max_attempts=max_attempts) as backend:
        with pytest.raises(GenerationError, match=rf"failed after {max_attempts} attempt\(s\) \(http_5xx\)"):
            backend.generate(make_batch([[1, 2]], pad_token_id=0))
    assert len(stub.requests) == max_attempts


def test_async_failure_raises_and_cancels_the_rest() -> None:
    async def slow_or_broken(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        if body["prompt"] == [9]:
            return 500, b'{"error": "boom"}'
        await asyncio.sleep(30)
        return 200, orjson.dumps(completion([3], [-0.1]))

    data = make_batch([[9], [1], [1]], pad_token_id=0)

    async def consume(backend: VllmHttpGeneration) -> None:
        async for _ in backend.generate_async(data):
            pass

    with LoopbackServer(slow_or_broken) as stub, VllmHttpGeneration(CONFIG, stub.base_url) as backend:
        started = time.monotonic()
        with pytest.raises(GenerationError, match=r"sample 0: .* \(http_5xx\)"):
            asyncio.run(consume(backend))
        assert time.monotonic() - started < 15  # did not wait for the slow siblings


def test_dead_replica_fails_fast_with_generation_error() -> None:
    url = closed_port_url()
    started = time.monotonic()
    with VllmHttpGeneration(CONFIG, url) as backend, pytest.raises(GenerationError) as failure:
        backend.generate(make_batch([[1, 2]], pad_token_id=0))
    assert time.monotonic() - started < 15
    assert url in str(failure.value) and "(connect)" in str(failure.value) and "sample 0" in str(failure.value)


def test_unresponsive_replica_times_out_with_generation_error() -> None:
    with unresponsive_url() as url, VllmHttpGeneration(CONFIG, url, request_timeout_s=0.5) as backend:
        started = time.monotonic()
        with pytest.raises(GenerationError, match=r"sample 0: .* \(timeout\)"):
            backend.generate(make_batch([[1, 2]], pad_token_id=0))
        assert time.monotonic() - started < 15

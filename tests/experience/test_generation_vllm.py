"""VllmHttpGeneration against the real vLLM serving the bundled SmolLM2 (token in / token out)."""

import asyncio
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.generation import VllmHttpGeneration
from tests.helpers.model import MODEL_DIR, MODEL_NAME
from tests.experience.generation_support import (
    CountingProxy,
    chat_prompt,
    generated_part,
    make_batch,
)

pytestmark = pytest.mark.vllm

PAD = 2
MAX_SEQ_LEN = 2048


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(MODEL_DIR)


def config(**overrides: Any) -> dict[str, Any]:
    return {"model_name": MODEL_NAME, "max_new_tokens": 12, "max_seq_len": MAX_SEQ_LEN, "pad_token_id": PAD,
            "temperature": 1.0, "top_p": 1.0, **overrides}


def direct_greedy(vllm_server: Any, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    """vLLM's own greedy answer to `prompt`, asked directly (no backend in between)."""
    return httpx.post(f"{vllm_server.base_url}/completions", trust_env=False, timeout=120, json={
        "model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 0,
        "return_token_ids": True,
    }).json()["choices"][0]


def test_greedy_ids_and_logprobs_are_vllms_own(vllm_server: Any, tokenizer: Any) -> None:
    prompt = chat_prompt(tokenizer, "What is 2+3?")
    direct = direct_greedy(vllm_server, prompt, 12)
    data = make_batch([prompt], PAD)
    with VllmHttpGeneration(config(), vllm_server.base_url) as backend:
        out = backend.generate(data, greedy=True)
    ids, logprobs = generated_part(out, data, 0)
    assert ids == direct["token_ids"]
    assert int(out["generation_lengths"][0]) == len(ids) == len(logprobs)
    # Equal up to bf16 noise: the shared server may batch our request with others, which moves the last digits.
    assert logprobs == pytest.approx(direct["logprobs"]["token_logprobs"], abs=2e-2)
    assert bool(out["truncated"][0]) == (direct["finish_reason"] == "length")
    assert out["output_ids"][0, :len(prompt)].tolist() == prompt
    assert out["logprobs"][0, :len(prompt)].abs().sum() == 0


def test_stop_strings_end_the_generation(vllm_server: Any, tokenizer: Any) -> None:
    prompts = [chat_prompt(tokenizer, "Count from 1 to 20, one number per line.")] * 2
    data = make_batch(prompts, PAD, stop_strings=[["3"], None])
    with VllmHttpGeneration(config(max_new_tokens=40, stop_strings=["6"]), vllm_server.base_url) as backend:
        out = backend.generate(data, greedy=True)
    for row, stop in ((0, "3"), (1, "6")):  # row 0 stops at its own "3"; row 1 only at the config's "6"
        ids, logprobs = generated_part(out, data, row)
        text = tokenizer.decode(ids)
        assert text.endswith(stop) and text.count(stop) == 1, text
        assert len(logprobs) == len(ids) and not out["truncated"][row]


def test_length_limits_clamp_and_truncate_without_sending_what_has_no_room(vllm_server: Any,
                                                                          tokenizer: Any) -> None:
    counting = chat_prompt(tokenizer, "Count from 1 to 100.")
    filler = [tokenizer.encode(" the")[0]] * (MAX_SEQ_LEN - 3 - len(counting))
    almost_full, full = filler + counting, filler + counting + counting[-3:]
    data = make_batch([almost_full, full], PAD)
    with CountingProxy(vllm_server.base_url) as proxy, VllmHttpGeneration(config(), proxy.base_url) as backend:
        out = backend.generate(data, greedy=True)
    assert len(proxy.requests) == 1  # the full prompt was never sent
    assert proxy.requests[0]["body"]["max_tokens"] == 3
    assert out["generation_lengths"].tolist()[1] == 0 and bool(out["truncated"][1])
    assert int(out["unpadded_sequence_lengths"][1]) == MAX_SEQ_LEN
    generated, _ = generated_part(out, data, 0)
    assert 1 <= len(generated) <= 3
    assert bool(out["truncated"][0]) == (len(generated) == 3 and generated[-1] != PAD)


def test_generate_async_yields_every_index_once(vllm_server: Any, tokenizer: Any) -> None:
    questions = ["What is 2+3?", "Name a color.", "Capital of France?", "Say hi."]
    data = make_batch([chat_prompt(tokenizer, q) for q in questions], PAD)

    async def collect(backend: VllmHttpGeneration) -> list[int]:
        seen = []
        async for index, one in backend.generate_async(data):
            assert one.size == 1 and len(generated_part(one, data.select_indices([index]), 0)[0]) >= 1
            seen.append(index)
        return seen

    with VllmHttpGeneration(config(), vllm_server.base_url) as backend:
        assert backend.supports_async
        assert sorted(asyncio.run(collect(backend))) == [0, 1, 2, 3]


def test_sync_generate_works_inside_a_running_event_loop(vllm_server: Any, tokenizer: Any) -> None:
    prompt = chat_prompt(tokenizer, "What is 2+3?")
    data = make_batch([prompt], PAD)

    async def call_sync(backend: VllmHttpGeneration) -> Any:
        asyncio.get_running_loop()  # we are inside a loop: asyncio.run() here would fail
        return backend.generate(data, greedy=True)

    with VllmHttpGeneration(config(), vllm_server.base_url) as backend:
        out = asyncio.run(call_sync(backend))
    ids, _ = generated_part(out, data, 0)
    assert ids == direct_greedy(vllm_server, prompt, 12)["token_ids"]  # "2 + 3 = 5" and end-of-turn
    assert tokenizer.decode(ids, skip_special_tokens=True).strip() == "2 + 3 = 5"


def test_requests_spread_over_replicas(vllm_server: Any, tokenizer: Any) -> None:
    prompt = chat_prompt(tokenizer, "Say hi.")
    data = make_batch([prompt] * 4, PAD)
    with CountingProxy(vllm_server.base_url) as first, CountingProxy(vllm_server.base_url) as second:
        with VllmHttpGeneration(config(max_new_tokens=4), [first.base_url, second.base_url]) as backend:
            out = backend.generate(data, greedy=True)
    assert (len(first.requests), len(second.requests)) == (2, 2)
    assert all(r["path"] == "/v1/completions" for r in first.requests + second.requests)
    expected = direct_greedy(vllm_server, prompt, 4)["token_ids"]
    assert len(expected) == 4  # the greeting runs past 4 tokens: every row is cut there
    assert [generated_part(out, data, row)[0] for row in range(4)] == [expected] * 4
    assert out["truncated"].tolist() == [True] * 4

"""HFGeneration on the bundled SmolLM2: on CPU always, and the same tests on CUDA where there is a GPU."""

import asyncio
import math
import time
from typing import Any, Iterator

import httpx
import pytest
import torch

from nemo_gym.experience.generation import HFGeneration
from tests.helpers.model import MODEL_DIR, MODEL_NAME
from tests.experience.generation_support import chat_prompt, generated_part, make_batch

CONFIG = {"max_new_tokens": 10, "max_seq_len": 2048, "temperature": 1.0, "top_p": 1.0}


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> Iterator[HFGeneration]:
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.fail("the gpu tests need a CUDA device; deselect them with -m 'not gpu' on machines without one")
    # One intra-op thread: on a small machine shared with the vLLM server, two threads contend and run ~5x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with HFGeneration(CONFIG, MODEL_DIR, device=request.param) as hf:
            yield hf
    finally:
        torch.set_num_threads(threads)


def prompts(backend: HFGeneration, *questions: str) -> list[list[int]]:
    return [chat_prompt(backend.tokenizer, q) for q in questions]


def assert_well_formed(out: Any, data: Any, pad: int) -> None:
    """The output contract: prompt + generation right-padded with `pad`, one finite log-prob <= 0 per generated
    token."""
    batch, width = out["output_ids"].shape
    assert out["logprobs"].shape == (batch, width) and width >= data["input_ids"].shape[1]
    assert out["generation_lengths"].tolist() == (out["unpadded_sequence_lengths"] - data["input_lengths"]).tolist()
    for row in range(batch):
        length, end = int(data["input_lengths"][row]), int(out["unpadded_sequence_lengths"][row])
        assert out["output_ids"][row, :length].tolist() == data["input_ids"][row, :length].tolist()
        assert (out["output_ids"][row, end:] == pad).all() and (out["logprobs"][row, :length] == 0).all()
        ids, logprobs = generated_part(out, data, row)
        assert len(logprobs) == len(ids) == int(out["generation_lengths"][row])
        assert all(math.isfinite(lp) and lp <= 0 for lp in logprobs)
        assert (out["logprobs"][row, end:] == 0).all()


def test_batch_output_shapes_padding_and_logprobs(backend: HFGeneration) -> None:
    data = make_batch(prompts(backend, "What is 2+3?", "Count from 1 to 20.", "Say hi."), backend.pad_token_id)
    out = backend.generate(data, greedy=True)
    assert_well_formed(out, data, backend.pad_token_id)
    assert out["truncated"].dtype == torch.bool
    two_plus_three, _ = generated_part(out, data, 0)
    assert two_plus_three[-1] in backend.eos_ids and not out["truncated"][0]  # "2 + 3 = 5" then end-of-turn
    assert len(generated_part(out, data, 1)[0]) == CONFIG["max_new_tokens"] and out["truncated"][1]


def test_greedy_is_deterministic_and_top_k_1_sampling_agrees(backend: HFGeneration) -> None:
    data = make_batch(prompts(backend, "Name a color.", "Capital of France?"), backend.pad_token_id)
    first, second = backend.generate(data, greedy=True), backend.generate(data, greedy=True)
    assert torch.equal(first["output_ids"], second["output_ids"])
    assert torch.allclose(first["logprobs"], second["logprobs"])
    with HFGeneration({**CONFIG, "top_k": 1}, backend.model, backend.tokenizer) as top_1:
        sampled = top_1.generate(data)
    assert torch.equal(sampled["output_ids"], first["output_ids"])


def test_sampling_is_repeatable_with_a_seed(backend: HFGeneration) -> None:
    data = make_batch(prompts(backend, "Write a short poem.", "Tell me a story."), backend.pad_token_id)
    outputs = []
    for seed in (7, 7, 8):
        with HFGeneration(CONFIG, backend.model, backend.tokenizer, seed=seed) as seeded:
            outputs.append(seeded.generate(data)["output_ids"])
    assert torch.equal(outputs[0], outputs[1])
    assert not torch.equal(outputs[0], outputs[2])  # 20 tokens drawn at temperature 1 under another seed


def test_per_sample_stop_strings_do_not_stop_each_other(backend: HFGeneration) -> None:
    question = "Count from 1 to 20, one number per line."  # greedy: "1. 1\n2. 2\n3. 3\n..."
    data = make_batch(prompts(backend, question, question, question), backend.pad_token_id,
                      stop_strings=[["3"], ["2"], None])
    with HFGeneration({**CONFIG, "max_new_tokens": 12}, backend.model, backend.tokenizer) as hf:
        out = hf.generate(data, greedy=True)
    assert_well_formed(out, data, backend.pad_token_id)
    texts = [backend.tokenizer.decode(generated_part(out, data, row)[0]) for row in range(3)]
    assert texts[0].endswith("3") and texts[0].count("3") == 1 and not out["truncated"][0], texts
    assert texts[1].endswith("2") and texts[1].count("2") == 1 and not out["truncated"][1], texts
    # The row without stop strings runs past both other rows' stop strings, to its length limit.
    assert "2" in texts[2] and "3" in texts[2] and out["truncated"][2], texts


def test_lengths_clamp_to_max_seq_len_and_per_sample_caps(backend: HFGeneration) -> None:
    prompt = prompts(backend, "Count from 1 to 100.")[0]
    # Row 0 has room for 3 tokens under max_seq_len, row 1 none, row 2 its own cap of 2.
    data = make_batch([prompt, prompt + prompt[-3:], prompt], backend.pad_token_id, max_new_tokens=[10, 10, 2])
    with HFGeneration({**CONFIG, "max_seq_len": len(prompt) + 3}, backend.model, backend.tokenizer) as hf:
        out = hf.generate(data, greedy=True)
    assert_well_formed(out, data, backend.pad_token_id)
    assert out["generation_lengths"].tolist() == [3, 0, 2]
    assert out["truncated"].tolist() == [True, True, True]


def test_generate_async_keeps_the_loop_running(backend: HFGeneration) -> None:
    data = make_batch(prompts(backend, "Say hi.", "What is 2+3?", "Name a color."), backend.pad_token_id)

    async def generate_while_ticking() -> tuple[list[int], list[float]]:
        ticks: list[float] = []

        async def ticker() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        seen, started = [], time.monotonic()
        async for index, one in backend.generate_async(data, greedy=True):
            assert_well_formed(one, data.select_indices([index]), backend.pad_token_id)
            seen.append(index)
        ended = time.monotonic()
        ticking.cancel()
        return seen, [started, *(t for t in ticks if t >= started), ended]

    seen, times = asyncio.run(generate_while_ticking())
    assert sorted(seen) == [0, 1, 2]
    # A backend that blocked the loop would leave one gap as long as the whole generation.
    duration, longest_gap = times[-1] - times[0], max(b - a for a, b in zip(times, times[1:]))
    assert len(times) >= 4 and longest_gap < max(0.1, duration / 2), (duration, longest_gap)


@pytest.mark.vllm
@pytest.mark.parametrize("backend", ["cpu"], indirect=True)  # float32 on CPU: the reference for vLLM's numbers
def test_logprobs_match_vllms_raw_logprobs(backend: HFGeneration, vllm_server: Any) -> None:
    prompt = prompts(backend, "What is 2+3?")[0]
    data = make_batch([prompt], backend.pad_token_id)
    ids, logprobs = generated_part(backend.generate(data, greedy=True), data, 0)
    direct = httpx.post(f"{vllm_server.base_url}/completions", trust_env=False, timeout=120, json={
        "model": MODEL_NAME, "prompt": prompt, "max_tokens": len(ids), "temperature": 0, "logprobs": 0,
        "return_token_ids": True,
    }).json()["choices"][0]
    assert ids == direct["token_ids"]
    # Same quantity (log_softmax of raw logits); vLLM serves bf16 weights, so agreement is to bf16 precision.
    assert logprobs == pytest.approx(direct["logprobs"]["token_logprobs"], abs=0.05)

"""A generation config given to the native path (the trajectory collector's `policy.generation`) takes effect or is
refused: its cap and stop strings go with every request, and what only the backend applies must be the backend's."""

import asyncio
from typing import Any, AsyncIterator

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.errors import UnsupportedBackendError
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.experience.scripted import CountdownEnvironment, ScriptedGeneration, countdown_samples
from tests.helpers.model import MODEL_DIR

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
TEMPLATE = ChatTemplate(TOKENIZER)
ENVS = {"countdown": CountdownEnvironment(next_stop_strings=["</guess>"])}
LONG_REPLY = TEMPLATE.encode("one two three four five six seven eight nine ten")


class RecordingGeneration(ScriptedGeneration):
    """ScriptedGeneration that keeps the stop strings and caps of every request."""

    def __init__(self) -> None:
        super().__init__(lambda prompt: LONG_REPLY)
        self.requests: list[tuple[list[Any], list[int]]] = []

    async def generate_async(self, data: BatchedDataDict, greedy: bool = False
                             ) -> AsyncIterator[tuple[int, BatchedDataDict]]:
        self.requests.append((list(data["stop_strings"]), data["max_new_tokens"].tolist()))
        async for item in super().generate_async(data, greedy):
            yield item


def _sample() -> dict[str, Any]:
    batch = countdown_samples(TEMPLATE, [2])
    return {**{key: batch[key][0] for key in batch}, "idx": 0}


def test_max_new_tokens_and_stop_strings_go_with_every_request() -> None:
    policy = RecordingGeneration()
    manager = RolloutManager(TOKENIZER, ENVS, 1, 2048, policy_generation=policy,
                             generation_config={"max_new_tokens": 3, "stop_strings": ["###"]})
    record = asyncio.run(manager.run_rollout(_sample()))
    # Turn 1 has only the config's stop string; turn 2 the environment's after it.
    assert [stops for stops, _ in policy.requests] == [[["###"]], [["###", "</guess>"]]]
    assert all(caps == [3] for _, caps in policy.requests)
    assistant = [m["token_ids"].tolist() for m in record.completions[0].message_log if m["role"] == "assistant"]
    assert assistant == [LONG_REPLY[:3]] * 2 and record.completions[0].truncated


def test_without_a_generation_config_the_backend_decides_alone() -> None:
    policy = RecordingGeneration()
    record = asyncio.run(RolloutManager(TOKENIZER, ENVS, 1, 2048, policy_generation=policy).run_rollout(_sample()))
    assert [stops for stops, _ in policy.requests] == [[None], [["</guess>"]]]
    assistant = [m["token_ids"].tolist() for m in record.completions[0].message_log if m["role"] == "assistant"]
    assert assistant == [LONG_REPLY] * 2


def _vllm_backend(**settings: Any) -> VllmHttpGeneration:
    """A real backend with a config (construction does not connect)."""
    return VllmHttpGeneration({"model_name": "m", "max_seq_len": 2048, "pad_token_id": 2, "max_new_tokens": 32,
                               **settings}, "http://127.0.0.1:9/v1")


@pytest.mark.parametrize("config, backend_settings, named", [
    ({"temperature": 0.5}, {}, "temperature: 0.5 vs 1.0"),
    ({"top_p": 0.9}, {"top_p": 0.8}, "top_p: 0.9 vs 0.8"),
    ({"top_k": 5}, {}, "top_k: 5 vs None"),
    ({"stop_token_ids": [7]}, {}, "stop_token_ids: [7] vs []"),
    ({"max_new_tokens": 64}, {}, "max_new_tokens: 64 vs 32"),
], ids=["temperature", "top_p", "top_k", "stop_token_ids", "max_new_tokens_above_the_backends"])
def test_what_only_the_backend_applies_must_be_the_backends(config: dict, backend_settings: dict,
                                                             named: str) -> None:
    with _vllm_backend(**backend_settings) as backend, pytest.raises(ValueError, match=named.replace("[", r"\[")):
        RolloutManager(TOKENIZER, ENVS, 1, 2048, policy_generation=backend, generation_config=config)


def test_agreeing_settings_and_greedy_pass() -> None:
    with _vllm_backend(temperature=0.7, top_k=5) as backend:
        RolloutManager(TOKENIZER, ENVS, 1, 2048, policy_generation=backend,
                       generation_config={"temperature": 0.7, "top_k": 5, "top_p": 1.0, "max_new_tokens": 16})
        # Greedy samples nothing, so the sampling settings cannot disagree.
        RolloutManager(TOKENIZER, ENVS, 1, 2048, policy_generation=backend, greedy=True,
                       generation_config={"temperature": 0.2})


def test_a_backend_without_a_config_cannot_take_sampling_settings() -> None:
    with pytest.raises(UnsupportedBackendError, match="sets temperature, which only the backend applies"):
        RolloutManager(TOKENIZER, ENVS, 1, 2048, policy_generation=RecordingGeneration(),
                       generation_config={"temperature": 0.5, "max_new_tokens": 3})

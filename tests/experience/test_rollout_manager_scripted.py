"""RolloutManager's native path on a scripted policy: one PromptGroupRecord per prompt, failures cancel the group."""

import asyncio

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.errors import PromptGroupError, SampleRolloutError, UnsupportedBackendError
from nemo_gym.experience.rollout_manager import AsyncRolloutImpl, RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.helpers.model import MODEL_DIR
from tests.experience.scripted import CountdownEnvironment, ScriptedGeneration, countdown_samples

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
TEMPLATE = ChatTemplate(TOKENIZER)
ANSWER = TEMPLATE.encode("OK") + [2]
ENVS = {"countdown": CountdownEnvironment()}


def _sample(turns: int = 2, idx: int = 7) -> dict:
    batch = countdown_samples(TEMPLATE, [turns])
    return {**{key: batch[key][0] for key in batch}, "idx": idx}


def test_run_rollout_returns_one_group_of_n_completions() -> None:
    manager = RolloutManager(TOKENIZER, ENVS, num_generations_per_prompt=4, max_seq_len=2048,
                             policy_generation=ScriptedGeneration(lambda p: ANSWER))
    sample = _sample()
    record = asyncio.run(manager.run_rollout(sample))
    assert record.prompt_idx == 7 and record.metadata["task_name"] == "countdown"
    assert [m["token_ids"].tolist() for m in record.prompt] == [m["token_ids"].tolist() for m in sample["message_log"]]
    assert record.extra_env_info == {"turns": 2}
    assert len(record.completions) == 4 and record.rewards == [0.5] * 4
    for completion in record.completions:
        assert not completion.truncated and completion.logprobs_valid
        assert len(completion.message_log) == len(sample["message_log"]) + 4
    assert record.rollout_metrics["total_turns"] == 8 and record.rollout_metrics["mean_total_reward"] == 0.5
    assert record.metadata["generation_time_s"] >= 0
    assert sample["message_log"] is not record.prompt and len(sample["message_log"]) == 1


def test_a_failed_generation_cancels_its_siblings_and_raises_prompt_group_error() -> None:
    class FailsSecondCall(ScriptedGeneration):
        requests = 0

        async def generate_async(self, data, greedy=False):
            self.requests += 1
            if self.requests == 2:
                raise RuntimeError("engine died")
            async for item in super().generate_async(data, greedy):
                yield item

    policy = FailsSecondCall(lambda p: ANSWER, delay_s=0.5)
    impl = AsyncRolloutImpl(TOKENIZER, ENVS, 4, 2048, policy)
    with pytest.raises(PromptGroupError) as caught:
        asyncio.run(impl.run_rollout(_sample()))
    assert caught.value.prompt_idx == 7 and caught.value.traj_idx == 1
    assert isinstance(caught.value.__cause__, SampleRolloutError)
    assert policy.finished == 0, "siblings were left running instead of being cancelled"


def test_configuration_errors_are_caught_at_construction() -> None:
    with pytest.raises(ValueError, match="policy_generation"):
        RolloutManager(TOKENIZER, ENVS, 2, 2048)
    with pytest.raises(ValueError, match="generation_config"):
        RolloutManager(TOKENIZER, ENVS, 2, 2048, use_nemo_gym=True, head_server_url="http://127.0.0.1:9")

    class SyncOnly(ScriptedGeneration):
        supports_async = False

    with pytest.raises(UnsupportedBackendError):
        RolloutManager(TOKENIZER, ENVS, 2, 2048, policy_generation=SyncOnly(lambda p: ANSWER))

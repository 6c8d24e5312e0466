"""What a NeMo RL trainer brings works in the rollout loops, or is refused up front with what to do about it:
environments that are Ray actors, backends written against NeMo RL's GenerationInterface, and NeMo RL's rule that a
turn cut by max_new_tokens does not end a multi-turn episode."""

import asyncio

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.environments.calling import RemoteEnvironment
from nemo_gym.experience.errors import EnvironmentStepError, PromptGroupError, UnsupportedBackendError
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import flat_token_ids
from nemo_gym.experience.turns.rollouts import run_async_multi_turn_rollout, run_multi_turn_rollout
from tests.experience.nemo_rl_fakes import LOGPROB, ActorHandle, NemoRLStyleGeneration, fake_ray_get
from tests.experience.scripted import CountdownEnvironment, ScriptedGeneration, countdown_samples
from tests.helpers.model import MODEL_DIR

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
TEMPLATE = ChatTemplate(TOKENIZER)
ANSWER = TEMPLATE.encode("OK") + [TOKENIZER.eos_token_id]
LONG = TEMPLATE.encode("I think the answer might be seven, or maybe eight")  # no end-of-turn token
ROLLOUTS = {"batched": run_multi_turn_rollout, "async": run_async_multi_turn_rollout}


class CappedGeneration(ScriptedGeneration):
    """Our interface, with a configured max_new_tokens: a longer reply is cut there and reported truncated."""

    def __init__(self, reply: list[int], cap: int) -> None:
        super().__init__(lambda prompt: reply)
        self.cap = cap

    def _one(self, data: BatchedDataDict, i: int) -> BatchedDataDict:
        return super()._one(BatchedDataDict({**data, "max_new_tokens": data["max_new_tokens"].clamp(max=self.cap)}), i)


# ---- a turn cut by max_new_tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_a_turn_cut_by_max_new_tokens_does_not_end_the_episode(mode: str) -> None:
    batch, metrics = ROLLOUTS[mode](CappedGeneration(LONG, cap=5), countdown_samples(TEMPLATE, [3, 1]), TOKENIZER,
                                    {"countdown": CountdownEnvironment()}, max_seq_len=2048)
    assert [sum(m["role"] == "assistant" for m in log) for log in batch["message_log"]] == [3, 1]
    assert all(len(m["token_ids"]) == 5 for log in batch["message_log"] for m in log if m["role"] == "assistant")
    assert batch["total_reward"].tolist() == [0.75, 0.25]
    # Truncated (a turn hit a length limit), and still ended by the environment, as in NeMo RL.
    assert batch["truncated"].tolist() == [True, True]
    assert metrics["truncation_rate"] == 1.0 and metrics["natural_termination_rate"] == 1.0
    assert metrics["total_turns"] == 4


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_end_on_truncated_turn_ends_the_episode_there(mode: str) -> None:
    batch, metrics = ROLLOUTS[mode](CappedGeneration(LONG, cap=5), countdown_samples(TEMPLATE, [3, 1]), TOKENIZER,
                                    {"countdown": CountdownEnvironment()}, max_seq_len=2048,
                                    end_on_truncated_turn=True)
    assert [sum(m["role"] == "assistant" for m in log) for log in batch["message_log"]] == [1, 1]
    assert batch["total_reward"].tolist() == [0.25, 0.25] and batch["truncated"].tolist() == [True, True]
    assert metrics["natural_termination_rate"] == 0.5 and metrics["total_turns"] == 2


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_reaching_max_seq_len_still_ends_the_episode(mode: str) -> None:
    prompt_len = len(flat_token_ids(countdown_samples(TEMPLATE, [9])["message_log"][0]))
    batch, _ = ROLLOUTS[mode](CappedGeneration(LONG, cap=5), countdown_samples(TEMPLATE, [9]), TOKENIZER,
                              {"countdown": CountdownEnvironment()}, max_seq_len=prompt_len + 12)
    assert len(flat_token_ids(batch["message_log"][0])) == prompt_len + 12
    assert batch["truncated"].tolist() == [True]


def test_rollout_manager_passes_end_on_truncated_turn() -> None:
    sample = {**{k: v[0] for k, v in countdown_samples(TEMPLATE, [3]).items()}, "idx": 0}
    for end, turns in ((False, 3), (True, 1)):
        manager = RolloutManager(TOKENIZER, {"countdown": CountdownEnvironment()}, 2, 2048,
                                 policy_generation=CappedGeneration(LONG, cap=5), end_on_truncated_turn=end)
        record = asyncio.run(manager.run_rollout(sample))
        assert record.rollout_metrics["total_turns"] == 2 * turns and all(c.truncated for c in record.completions)


# ---- environments that are Ray actors ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["awaitable", "future"])
@pytest.mark.parametrize("mode", ROLLOUTS)
def test_an_actor_handle_environment_works_as_it_is(mode: str, kind: str) -> None:
    handle = ActorHandle(CountdownEnvironment(), kind)
    try:
        batch, metrics = ROLLOUTS[mode](ScriptedGeneration(lambda p: ANSWER), countdown_samples(TEMPLATE, [1, 3]),
                                        TOKENIZER, {"countdown": handle}, max_seq_len=2048)
    finally:
        handle.kill()
    assert batch["total_reward"].tolist() == [0.25, 0.75] and metrics["total_turns"] == 4
    assert [info.get("seen") for info in batch["extra_env_info"]] == [None, 2]
    assert handle.actor_threads and all(name.startswith("fake_actor") for name in handle.actor_threads)


def test_an_opaque_future_needs_its_resolver_and_the_error_says_how_to_give_it() -> None:
    handle = ActorHandle(CountdownEnvironment(), "opaque")
    try:
        with pytest.raises(EnvironmentStepError, match=r"RemoteEnvironment\(handle, resolve=ray.get\)"):
            run_multi_turn_rollout(ScriptedGeneration(lambda p: ANSWER), countdown_samples(TEMPLATE, [2]),
                                   TOKENIZER, {"countdown": handle}, max_seq_len=2048)
        wrapped = RemoteEnvironment(handle, resolve=fake_ray_get)
        batch, _ = run_async_multi_turn_rollout(ScriptedGeneration(lambda p: ANSWER),
                                                countdown_samples(TEMPLATE, [2]), TOKENIZER,
                                                {"countdown": wrapped}, max_seq_len=2048)
    finally:
        handle.kill()
    assert batch["total_reward"].tolist() == [0.5]


def test_an_environment_without_step_is_refused_before_any_rollout() -> None:
    class ActorClass:  # what `ray.remote(Env)` gives before `.remote(...)` makes an actor
        def remote(self) -> None:
            raise AssertionError("not to be called")

    policy = ScriptedGeneration(lambda p: ANSWER)
    with pytest.raises(EnvironmentStepError, match=r"'countdown'.*actor class.*EnvClass.remote"):
        RolloutManager(TOKENIZER, {"countdown": ActorClass()}, 2, 2048, policy_generation=policy)
    assert policy.calls == 0


# ---- backends written against NeMo RL's GenerationInterface --------------------------------------------------


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_a_nemo_rl_style_backend_works_without_our_extra_attributes(mode: str) -> None:
    policy = NemoRLStyleGeneration(LONG, max_new_tokens=6, pad_token_id=TOKENIZER.pad_token_id)
    batch, metrics = ROLLOUTS[mode](policy, countdown_samples(TEMPLATE, [2, 1]), TOKENIZER,
                                    {"countdown": CountdownEnvironment()}, max_seq_len=2048)
    for log in batch["message_log"]:
        for message in (m for m in log if m["role"] == "assistant"):
            assert message["token_ids"].tolist() == LONG[:6]
            assert message["generation_logprobs"].tolist() == [LOGPROB] * 6
    # No `truncated` reported: inferred from the configured max_new_tokens, and the episode went on.
    assert batch["truncated"].tolist() == [True, True] and metrics["total_turns"] == 3


def test_inputs_are_padded_with_the_backends_own_pad_id() -> None:
    policy = NemoRLStyleGeneration(ANSWER, max_new_tokens=8, pad_token_id=0)  # not the tokenizer's (2)
    run_multi_turn_rollout(policy, countdown_samples(TEMPLATE, [1, 100]), TOKENIZER,
                           {"countdown": CountdownEnvironment()}, max_seq_len=2048, max_rollout_turns=1)
    [data] = policy.seen_inputs
    short = int(data["input_lengths"].argmin())
    assert data["input_lengths"][short] < data["input_ids"].shape[1]
    assert set(data["input_ids"][short, int(data["input_lengths"][short]):].tolist()) == {0}


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_a_backend_that_ignores_the_per_sample_cap_never_overruns_max_seq_len(mode: str) -> None:
    policy = NemoRLStyleGeneration(LONG, max_new_tokens=len(LONG), pad_token_id=TOKENIZER.pad_token_id)
    prompt_len = len(flat_token_ids(countdown_samples(TEMPLATE, [5])["message_log"][0]))
    batch, _ = ROLLOUTS[mode](policy, countdown_samples(TEMPLATE, [5]), TOKENIZER,
                              {"countdown": CountdownEnvironment()}, max_seq_len=prompt_len + 4)
    log = batch["message_log"][0]
    assert len(flat_token_ids(log)) == prompt_len + 4
    assert log[1]["token_ids"].tolist() == LONG[:4] and len(log[1]["generation_logprobs"]) == 4
    assert batch["truncated"].tolist() == [True]


def test_a_backend_that_does_not_say_it_is_async_is_refused_with_what_to_set() -> None:
    policy = NemoRLStyleGeneration(ANSWER, max_new_tokens=8, pad_token_id=TOKENIZER.pad_token_id,
                                   async_engine=False)
    with pytest.raises(UnsupportedBackendError, match=r"backend.supports_async = True"):
        RolloutManager(TOKENIZER, {"countdown": CountdownEnvironment()}, 2, 2048, policy_generation=policy)
    policy.supports_async = True
    manager = RolloutManager(TOKENIZER, {"countdown": CountdownEnvironment()}, 2, 2048, policy_generation=policy)
    sample = {**{k: v[0] for k, v in countdown_samples(TEMPLATE, [1]).items()}, "idx": 0}
    assert asyncio.run(manager.run_rollout(sample)).rewards == [0.25, 0.25]


def test_a_backend_missing_required_outputs_is_a_typed_error() -> None:
    class NoLogprobs(NemoRLStyleGeneration):
        def _one(self, data: BatchedDataDict, i: int) -> BatchedDataDict:
            out = super()._one(data, i)
            del out["logprobs"]
            return out

    policy = NoLogprobs(ANSWER, max_new_tokens=8, pad_token_id=TOKENIZER.pad_token_id)
    manager = RolloutManager(TOKENIZER, {"countdown": CountdownEnvironment()}, 1, 2048, policy_generation=policy)
    sample = {**{k: v[0] for k, v in countdown_samples(TEMPLATE, [1]).items()}, "idx": 0}
    with pytest.raises(PromptGroupError) as caught:
        asyncio.run(manager.run_rollout(sample))
    assert isinstance(caught.value.__cause__.__cause__, UnsupportedBackendError)
    assert "logprobs" in str(caught.value)

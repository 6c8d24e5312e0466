"""The rollout loops' bookkeeping on a scripted policy and environment: exact metrics, token exactness, limits."""

import asyncio
import threading

import pytest
import torch
from transformers import AutoTokenizer

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.errors import (
    EnvironmentStepError,
    SampleRolloutError,
    UnknownTaskError,
    UnsupportedBackendError,
)
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import flat_token_ids
from nemo_gym.experience.turns.rollouts import (
    calculate_rewards,
    generate_responses_async,
    run_async_multi_turn_rollout,
    run_multi_turn_rollout,
)
from tests.helpers.model import MODEL_DIR
from tests.experience.scripted import LOGPROB, CountdownEnvironment, ScriptedGeneration, countdown_samples

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
TEMPLATE = ChatTemplate(TOKENIZER)
ANSWER = TEMPLATE.encode("OK") + [2]
ENVS = {"countdown": CountdownEnvironment()}
ROLLOUTS = {"batched": run_multi_turn_rollout, "async": run_async_multi_turn_rollout}


def _policy() -> ScriptedGeneration:
    return ScriptedGeneration(lambda prompt: ANSWER)


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_metrics_and_rewards_on_known_turn_counts(mode: str) -> None:
    batch, metrics = ROLLOUTS[mode](_policy(), countdown_samples(TEMPLATE, [1, 2, 3]), TOKENIZER, ENVS,
                                    max_seq_len=2048, max_rollout_turns=5)
    assert batch["total_reward"].tolist() == [0.25, 0.5, 0.75]
    # Only samples that go on take the environment's new state (the final step's state is not kept).
    assert [info.get("seen") for info in batch["extra_env_info"]] == [None, 1, 2]
    expected_env_tokens = []
    for log in batch["message_log"]:
        assistant = [m for m in log if m["role"] == "assistant"]
        assert all(m["token_ids"].tolist() == ANSWER for m in assistant)
        assert all(m["generation_logprobs"].tolist() == [LOGPROB] * len(ANSWER) for m in assistant)
        assert [m["role"] for m in log[1:]] == ["assistant", "user"] * len(assistant)
        expected_env_tokens.append(sum(len(m["token_ids"]) for m in log[1:] if m["role"] == "user"))
    assert metrics["total_turns"] == 6 and metrics["avg_turns_per_sample"] == 2 and metrics["max_turns_per_sample"] == 3
    assert metrics["natural_termination_rate"] == 1.0 and metrics["truncation_rate"] == 0.0
    assert metrics["max_turns_reached_rate"] == 0.0
    assert metrics["mean_gen_tokens_per_sample"] == 2 * len(ANSWER)
    assert metrics["mean_env_tokens_per_sample"] == pytest.approx(sum(expected_env_tokens) / 3)
    assert metrics["mean_total_tokens_per_sample"] == pytest.approx(2 * len(ANSWER) + sum(expected_env_tokens) / 3)
    assert (metrics["mean_total_reward"], metrics["max_total_reward"], metrics["min_total_reward"]) == (0.5, 0.75, 0.25)


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_max_turns_reached(mode: str) -> None:
    batch, metrics = ROLLOUTS[mode](_policy(), countdown_samples(TEMPLATE, [1, 4, 9]), TOKENIZER, ENVS,
                                    max_seq_len=2048, max_rollout_turns=2)
    assert metrics["max_turns_reached_rate"] == pytest.approx(2 / 3)
    assert metrics["natural_termination_rate"] == pytest.approx(1 / 3)
    assert metrics["total_turns"] == 5
    assert batch["total_reward"].tolist() == [0.25, 0.5, 0.5]


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_flattened_length_never_exceeds_max_seq_len(mode: str) -> None:
    prompt_len = len(flat_token_ids(countdown_samples(TEMPLATE, [50])["message_log"][0]))
    for max_seq_len in (prompt_len + 1, prompt_len + len(ANSWER), prompt_len + len(ANSWER) + 3, prompt_len + 40):
        batch, metrics = ROLLOUTS[mode](_policy(), countdown_samples(TEMPLATE, [50]), TOKENIZER, ENVS,
                                        max_seq_len=max_seq_len)
        log = batch["message_log"][0]
        assert len(flat_token_ids(log)) == max_seq_len, max_seq_len
        assert batch["truncated"].tolist() == [True] and metrics["truncation_rate"] == 1.0
        assert metrics["natural_termination_rate"] == 0.0


@pytest.mark.parametrize("mode", ROLLOUTS)
def test_observation_follows_the_exact_generation_with_template_tokens(mode: str) -> None:
    """The generation stops without the end-of-turn id (a stop string): the observation's tokens close the turn."""
    no_eos = TEMPLATE.encode("OK.")
    batch, _ = ROLLOUTS[mode](ScriptedGeneration(lambda prompt: no_eos), countdown_samples(TEMPLATE, [2]),
                              TOKENIZER, ENVS, max_seq_len=2048)
    log = batch["message_log"][0]
    assert log[1]["token_ids"].tolist() == no_eos
    assert TOKENIZER.decode(log[2]["token_ids"].tolist()) == (
        "<|im_end|>\n<|im_start|>user\nturn 1 done<|im_end|>\n<|im_start|>assistant\n")


def test_raw_environment_role_is_tokenized_as_is() -> None:
    batch, _ = run_multi_turn_rollout(_policy(), countdown_samples(TEMPLATE, [1]), TOKENIZER,
                                      {"countdown": CountdownEnvironment(role="environment")}, max_seq_len=2048)
    observation = batch["message_log"][0][-1]
    assert observation["role"] == "environment"
    assert observation["token_ids"].tolist() == TEMPLATE.encode("turn 1 done")


def test_unknown_task_names_the_task() -> None:
    with pytest.raises(UnknownTaskError, match="'sudoku'"):
        run_multi_turn_rollout(_policy(), countdown_samples(TEMPLATE, [1], task_name="sudoku"), TOKENIZER, ENVS,
                               max_seq_len=2048)


def test_generation_failure_is_a_typed_error_naming_the_sample() -> None:
    samples = countdown_samples(TEMPLATE, [1, 2, 3])
    poisoned = flat_token_ids(samples["message_log"][1]).tolist()
    policy = ScriptedGeneration(lambda prompt: ANSWER, fail_when=lambda prompt: prompt == poisoned)
    with pytest.raises(SampleRolloutError) as caught:
        run_async_multi_turn_rollout(policy, samples, TOKENIZER, ENVS, max_seq_len=2048)
    assert (caught.value.sample_index, caught.value.stage, caught.value.turn) == (1, "generation", 0)


def test_environment_failure_is_a_typed_error() -> None:
    envs = {"countdown": CountdownEnvironment(fail_on_turn=2)}
    with pytest.raises(SampleRolloutError) as caught:
        run_async_multi_turn_rollout(_policy(), countdown_samples(TEMPLATE, [3]), TOKENIZER, envs, max_seq_len=2048)
    assert (caught.value.stage, caught.value.turn) == ("environment", 1)
    assert isinstance(caught.value.__cause__, EnvironmentStepError)
    with pytest.raises(EnvironmentStepError, match="CountdownEnvironment"):
        run_multi_turn_rollout(_policy(), countdown_samples(TEMPLATE, [3]), TOKENIZER, envs, max_seq_len=2048)


def test_async_generation_refuses_a_backend_without_an_async_path() -> None:
    class SyncOnly(ScriptedGeneration):
        supports_async = False

    samples = countdown_samples(TEMPLATE, [1])
    with pytest.raises(UnsupportedBackendError, match="SyncOnly"):
        asyncio.run(generate_responses_async(SyncOnly(lambda p: ANSWER), BatchedDataDict(), samples, TOKENIZER,
                                             torch.tensor([1])))
    with pytest.raises(UnsupportedBackendError):
        run_async_multi_turn_rollout(SyncOnly(lambda p: ANSWER), samples, TOKENIZER, ENVS, max_seq_len=2048)


def test_calculate_rewards_keeps_batch_order_across_tasks() -> None:
    envs = {"a": CountdownEnvironment(role="user"), "b": CountdownEnvironment(role="environment")}
    names = ["a", "b", "a", "b", "b"]
    batch = countdown_samples(TEMPLATE, [1, 1, 2, 2, 3])
    batch["task_name"] = names
    result = calculate_rewards(batch, envs)
    assert [o["role"] for o in result.observations] == ["user" if n == "a" else "environment" for n in names]
    assert result.terminateds.tolist() == [True, True, False, False, False]


def test_slow_synchronous_environment_does_not_block_the_event_loop() -> None:
    loop_ticked = threading.Event()

    class SlowEnvironment(CountdownEnvironment):
        def step(self, message_log_batch, metadata):
            assert threading.current_thread() is not threading.main_thread()
            # Returns only once the event loop has run 10 ticks meanwhile: a step run on the loop would wait in vain.
            assert loop_ticked.wait(timeout=60), "the event loop did not run while the environment stepped"
            return super().step(message_log_batch, metadata)

    async def main() -> None:
        async def ticker() -> None:
            for _ in range(10):
                await asyncio.sleep(0.01)
            loop_ticked.set()

        task = asyncio.create_task(ticker())
        from nemo_gym.experience.turns.rollouts import run_samples_concurrently
        await run_samples_concurrently(_policy(), countdown_samples(TEMPLATE, [1]), TOKENIZER,
                                       {"countdown": SlowEnvironment()}, max_seq_len=2048)
        await task

    asyncio.run(main())


def test_input_batch_is_not_modified() -> None:
    samples = countdown_samples(TEMPLATE, [2])
    before = [len(log) for log in samples["message_log"]]
    run_multi_turn_rollout(_policy(), samples, TOKENIZER, ENVS, max_seq_len=2048)
    run_async_multi_turn_rollout(_policy(), samples, TOKENIZER, ENVS, max_seq_len=2048)
    assert [len(log) for log in samples["message_log"]] == before and "seen" not in samples["extra_env_info"][0]

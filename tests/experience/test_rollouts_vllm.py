"""Multi-turn rollouts on the real vLLM: every assistant message holds exactly the ids and log-probs vLLM returned
for exactly the flattened conversation before it; length limits and stop strings hold."""

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import flat_token_ids
from nemo_gym.experience.turns.rollouts import run_async_multi_turn_rollout, run_multi_turn_rollout
from tests.helpers.model import MODEL_DIR
from tests.experience.generation_support import CountingProxy
from tests.experience.scripted import CountdownEnvironment, countdown_samples

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
TEMPLATE = ChatTemplate(TOKENIZER)
ENVS = {"countdown": CountdownEnvironment(next_stop_strings=["\n"])}
MAX_NEW_TOKENS = 24
ROLLOUTS = {"batched": run_multi_turn_rollout, "async": run_async_multi_turn_rollout}


def _backend(base_url: str, model: str, max_new_tokens: int = MAX_NEW_TOKENS, max_seq_len: int = 2048) -> VllmHttpGeneration:
    return VllmHttpGeneration({"model_name": model, "max_new_tokens": max_new_tokens, "max_seq_len": max_seq_len,
                               "pad_token_id": TOKENIZER.pad_token_id, "temperature": 1.0}, base_url)


def assert_token_exact(message_log: list, exchanges: list) -> None:
    """Each assistant message = vLLM's reply to a request whose prompt was the flattened log before it."""
    replies: dict[tuple, list] = {}
    for body, reply in exchanges:  # samples may share a prompt and, sampled, get different replies
        replies.setdefault(tuple(body["prompt"]), []).append(reply["choices"][0])
    for position, message in enumerate(message_log):
        if message["role"] != "assistant":
            continue
        prompt = tuple(flat_token_ids(message_log[:position]).tolist())
        assert prompt in replies, f"no request was sent for the conversation before message {position}"
        matching = [c for c in replies[prompt] if c["token_ids"] == message["token_ids"].tolist()]
        assert matching, f"message {position} holds ids vLLM never returned for its prompt"
        assert message["generation_logprobs"].tolist() == pytest.approx(matching[0]["logprobs"]["token_logprobs"])
        assert message["content"] == TOKENIZER.decode(matching[0]["token_ids"], skip_special_tokens=True)


@pytest.mark.vllm
@pytest.mark.parametrize("mode", ROLLOUTS)
def test_assistant_tokens_are_exactly_what_vllm_generated(vllm_server, mode: str) -> None:
    samples = countdown_samples(TEMPLATE, [1, 3, 2, 3])
    samples["stop_strings"] = [None, ["."], None, [","]]
    with CountingProxy(vllm_server.base_url) as proxy, _backend(proxy.base_url, vllm_server.model) as backend:
        batch, metrics = ROLLOUTS[mode](backend, samples, TOKENIZER, ENVS, max_seq_len=2048, max_rollout_turns=4)
    targets, turns = [1, 3, 2, 3], []
    for log, target, reward, truncated in zip(batch["message_log"], targets, batch["total_reward"].tolist(),
                                              batch["truncated"].tolist()):
        assert_token_exact(log, proxy.exchanges)
        assistant = [m for m in log if m["role"] == "assistant"]
        turns.append(len(assistant))
        assert reward == 0.25 * len(assistant)
        # A turn cut by max_new_tokens marks the sample truncated but does not end it (NeMo RL's rule): the
        # environment ends every sample, at its target.
        assert len(assistant) == target
        if truncated:
            assert any(len(m["token_ids"]) == MAX_NEW_TOKENS for m in assistant)
    n_truncated = sum(batch["truncated"].tolist())
    assert metrics["total_turns"] == sum(turns) and metrics["max_turns_per_sample"] == max(turns)
    assert metrics["truncation_rate"] == n_truncated / 4 and metrics["natural_termination_rate"] == 1.0
    # A sample's own stop strings apply to its first turn; later turns take the environment's ("\n"). vLLM stops
    # at the first token whose text completes the stop string, and keeps that whole token (which may go on past
    # the string: "...", ",\n"), so the string is in the last token's text and nowhere before it.
    for sample, stop in ((1, "."), (3, ",")):
        first = batch["message_log"][sample][1]
        ids = first["token_ids"].tolist()
        assert stop not in TOKENIZER.decode(ids[:-1], skip_special_tokens=True)
        if stop not in first["content"]:
            assert ids[-1] == TOKENIZER.eos_token_id or len(ids) == MAX_NEW_TOKENS


@pytest.mark.vllm
@pytest.mark.parametrize("mode", ROLLOUTS)
def test_rollouts_stop_at_max_seq_len(vllm_server, mode: str) -> None:
    samples = countdown_samples(TEMPLATE, [30, 30])
    prompt_len = len(flat_token_ids(samples["message_log"][0]))
    max_seq_len = prompt_len + 70
    # max_new_tokens above the room: only max_seq_len may end these samples.
    with _backend(vllm_server.base_url, vllm_server.model, max_new_tokens=4096) as backend:
        batch, metrics = ROLLOUTS[mode](backend, samples, TOKENIZER, ENVS, max_seq_len=max_seq_len)
    for log in batch["message_log"]:
        assert len(flat_token_ids(log)) == max_seq_len
    assert batch["truncated"].tolist() == [True, True] and metrics["truncation_rate"] == 1.0
    assert metrics["max_turns_reached_rate"] == 0.0 and metrics["natural_termination_rate"] == 0.0

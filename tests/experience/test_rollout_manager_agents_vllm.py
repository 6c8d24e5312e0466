"""AsyncNemoGymRolloutImpl through a real `ng_run` stack on the real vLLM: one PromptGroupRecord of N completions
per prompt, whose message logs hold exactly the token ids on the agents' response items; greedy, top_k and stop
strings reach vLLM, and max_rollout_turns and max_seq_len hold (a proxy records what vLLM receives)."""

from typing import Any, Iterator, Optional

import orjson
import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.errors import PromptGroupError
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import flat_token_ids
from nemo_gym.rollout_collection.helper import RolloutCollectionHelper
from tests.experience.generation_support import CountingProxy
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT, Stack, math_and_game_agents

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
DATA = REPO_ROOT / "nemo_gym" / "resources_servers"
GAMES = [orjson.loads(line) for line in (DATA / "number_guess" / "data" / "example.jsonl").read_bytes().splitlines()]
GAME = GAMES[0]
LONG_GAME = GAMES[1]  # the secret is 98: no first guess finds it, so the game goes on until a limit stops it
SUM = orjson.loads((DATA / "math" / "data" / "arithmetic_example.jsonl").read_bytes().splitlines()[0])
N = 3


class _Recorded:
    """A result stream that keeps every result it hands out."""

    def __init__(self, stream: Any, sink: list) -> None:
        self.stream, self.sink = stream, sink
        self.iterator = stream.__aiter__()

    def __aiter__(self) -> "_Recorded":
        return self

    async def __anext__(self) -> tuple[dict, dict]:
        row, result = await self.iterator.__anext__()
        self.sink.append(result)
        return row, result

    async def aclose(self) -> None:
        await self.stream.aclose()


class RecordingHelper(RolloutCollectionHelper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.results: list[dict] = []

    def run_examples(self, examples: Any, *args: Any, **kwargs: Any) -> _Recorded:
        return _Recorded(super().run_examples(examples, *args, **kwargs), self.results)


@pytest.fixture(scope="module")
def proxy(vllm_server) -> Iterator[CountingProxy]:
    with CountingProxy(vllm_server.base_url) as running:
        yield running


@pytest.fixture(scope="module")
def stack(vllm_server, proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with math_and_game_agents(proxy.base_url, vllm_server.model, tmp_path_factory.mktemp("agents")) as running:
        yield running


def _run(stack: Stack, row: dict, agent: str, idx: int = 5, max_seq_len: int = 2048,
         generation_config: Optional[dict] = None, stop_strings: Optional[list[str]] = None,
         **manager_kwargs: Any) -> tuple[Any, RecordingHelper]:
    import asyncio

    helper = RecordingHelper(stack.head_url)
    manager = RolloutManager(TOKENIZER, {}, N, max_seq_len,
                             generation_config=generation_config or {"temperature": 1.0, "max_new_tokens": 16},
                             use_nemo_gym=True, rollout_helper=helper, agent_name=agent, **manager_kwargs)
    datum = datum_from_row(row, ChatTemplate(TOKENIZER), agent, idx)
    if stop_strings is not None:
        datum["stop_strings"] = stop_strings
    return asyncio.run(manager.run_rollout(datum)), helper


def _generation_requests(proxy: CountingProxy, since: int) -> list[dict]:
    """The bodies vLLM received for generations (not /tokenize) after its first `since` requests."""
    return [r["body"] for r in proxy.requests[since:] if r["path"] in ("/v1/chat/completions", "/v1/completions")]


def _assistant_ids(completion: Any) -> list[list[int]]:
    return [m["token_ids"].tolist() for m in completion.message_log if m["role"] == "assistant"]


def _generations(result: dict) -> list[dict]:
    return [item for item in result["response"]["output"] if "generation_token_ids" in item]


@pytest.mark.vllm
@pytest.mark.parametrize("row, agent", [(GAME, "number_guess_agent"), (SUM, "math_simple_agent")],
                         ids=["multi_turn_game", "math"])
def test_group_token_ids_are_the_agents_response_items(stack: Stack, row: dict, agent: str) -> None:
    record, helper = _run(stack, row, agent)
    assert record.prompt_idx == 5 and record.metadata["agent_name"] == agent and len(record.completions) == N
    by_rollout = {result["_ng_rollout_index"]: result for result in helper.results}
    assert sorted(by_rollout) == list(range(N))
    for j, completion in enumerate(record.completions):
        result = by_rollout[j]
        generations = _generations(result)
        assistant = [m for m in completion.message_log if m["role"] == "assistant"]
        assert [m["token_ids"].tolist() for m in assistant] == [g["generation_token_ids"] for g in generations]
        for message, generation in zip(assistant, generations):
            assert message["generation_logprobs"].tolist() == pytest.approx(generation["generation_log_probs"])
        # Up to its last generation the log is that generation's exact prompt plus the generation: one contiguous
        # sequence. Then, as on the native path, the environment's answer to it, if it gave one.
        last = generations[-1]
        answered = "generation_token_ids" not in result["response"]["output"][-1]
        up_to_last = completion.message_log[:-1] if answered else completion.message_log
        assert flat_token_ids(up_to_last).tolist() == last["prompt_token_ids"] + last["generation_token_ids"]
        assert completion.message_log[-1]["role"] == ("user" if answered else "assistant")
        assert completion.reward == result["reward"] and completion.logprobs_valid
    if agent == "number_guess_agent":
        assert max(len(_generations(r)) for r in helper.results) > 1, "the game should take several turns"
    assert record.rollout_metrics["total_turns"] == sum(len(_generations(r)) for r in helper.results)


@pytest.mark.vllm
def test_a_failed_rollout_fails_the_group(stack: Stack) -> None:
    broken = {key: value for key, value in SUM.items() if key != "expected_answer"}  # the verifier refuses it
    with pytest.raises(PromptGroupError) as caught:
        _run(stack, broken, "math_simple_agent")
    assert caught.value.prompt_idx == 5
    assert getattr(caught.value.__cause__, "failure_class", None) == "http_4xx"


@pytest.mark.vllm
def test_top_k_and_stop_strings_reach_vllm_and_stop_it(stack: Stack, proxy: CountingProxy) -> None:
    since = len(proxy.requests)
    config = {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "max_new_tokens": 16, "stop_strings": ["\n"]}
    record, _ = _run(stack, SUM, "math_simple_agent", generation_config=config, stop_strings=["!"])
    sent = _generation_requests(proxy, since)
    assert len(sent) == N
    for body in sent:
        assert (body["temperature"], body["top_p"], body["top_k"]) == (0.7, 0.9, 5)
        assert body["stop"] == ["\n", "!"] and body["include_stop_str_in_output"] is True
        assert body["max_tokens"] == 16
    for completion in record.completions:
        [text] = [m["content"] for m in completion.message_log if m["role"] == "assistant"]
        assert "\n" not in text[:-1] and "!" not in text[:-1], text


@pytest.mark.vllm
def test_greedy_reaches_vllm_and_gives_identical_completions(stack: Stack, proxy: CountingProxy) -> None:
    since = len(proxy.requests)
    config = {"temperature": 1.0, "top_k": 5, "max_new_tokens": 16}
    record, _ = _run(stack, SUM, "math_simple_agent", generation_config=config, greedy=True)
    sent = _generation_requests(proxy, since)
    assert len(sent) == N and all((b["temperature"], b["top_p"], "top_k" in b) == (0.0, 1.0, False) for b in sent)
    assert len({str(_assistant_ids(c)) for c in record.completions}) == 1


@pytest.mark.vllm
def test_max_rollout_turns_bounds_the_agents_turns(stack: Stack, proxy: CountingProxy) -> None:
    since = len(proxy.requests)
    record, helper = _run(stack, LONG_GAME, "number_guess_agent", max_rollout_turns=2)
    assert all(len(_assistant_ids(c)) <= 2 for c in record.completions)
    assert len(_generation_requests(proxy, since)) == sum(len(_generations(r)) for r in helper.results) <= 2 * N
    # The secret is 98: a rollout that did not find it in two guesses was stopped by the limit.
    unsolved = [c for c in record.completions if c.reward == 0.0]
    assert record.rollout_metrics["max_turns_reached_rate"] == len(unsolved) / N
    assert all(len(_assistant_ids(c)) == 2 for c in unsolved)


@pytest.mark.vllm
def test_a_rollout_through_the_agents_never_exceeds_max_seq_len(stack: Stack, proxy: CountingProxy) -> None:
    prompt_length = len(flat_token_ids(datum_from_row(LONG_GAME, ChatTemplate(TOKENIZER), "g", 0)["message_log"]))
    cap = prompt_length + 40  # room for two or three short guesses and their answers, far fewer than max_turns
    since = len(proxy.requests)
    record, _ = _run(stack, LONG_GAME, "number_guess_agent", max_seq_len=cap)
    for body in _generation_requests(proxy, since):
        if "prompt" in body:  # token path: vLLM was never asked for more than the room the prompt left
            assert len(body["prompt"]) + body["max_tokens"] <= cap
    for completion in record.completions:
        assert len(flat_token_ids(completion.message_log)) <= cap
        # At the limit the rollout ends truncated, as on the native path; only finding 98 ends it sooner.
        assert completion.truncated or completion.reward == 1.0

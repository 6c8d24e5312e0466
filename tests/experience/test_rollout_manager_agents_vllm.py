"""AsyncNemoGymRolloutImpl through a real `ng_run` stack on the real vLLM: one PromptGroupRecord of N completions
per prompt, whose message logs hold exactly the token ids on the agents' response items."""

from typing import Any, Iterator

import orjson
import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.chat_template import ChatTemplate
from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.errors import PromptGroupError
from nemo_gym.experience.message_log import flat_token_ids
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.rollout_collection.helper import RolloutCollectionHelper
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT, Stack, environment_config, running_stack

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
DATA = REPO_ROOT / "nemo_gym" / "resources_servers"
GAME = orjson.loads((DATA / "number_guess" / "data" / "example.jsonl").read_bytes().splitlines()[0])
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
def stack(vllm_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    configs = ",".join([str(environment_config("math")), str(environment_config("number_guess")),
                        f"{REPO_ROOT}/configs/vllm_model.yaml"])
    model = [f"+policy_base_url={vllm_server.base_url}", "+policy_api_key=EMPTY",
             f"+policy_model_name={vllm_server.model}"]
    with running_stack([f"+config_paths=[{configs}]", *model], cwd=tmp_path_factory.mktemp("agents")) as running:
        yield running


def _run(stack: Stack, row: dict, agent: str, idx: int = 5) -> tuple[Any, RecordingHelper]:
    import asyncio

    helper = RecordingHelper(stack.head_url)
    manager = RolloutManager(TOKENIZER, {}, N, 2048, generation_config={"temperature": 1.0, "max_new_tokens": 16},
                             use_nemo_gym=True, rollout_helper=helper, agent_name=agent)
    datum = datum_from_row(row, ChatTemplate(TOKENIZER), agent, idx)
    return asyncio.run(manager.run_rollout(datum)), helper


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
        # The whole log is the last generation's exact prompt plus that generation: one contiguous sequence.
        last = generations[-1]
        assert flat_token_ids(completion.message_log).tolist() == last["prompt_token_ids"] + last["generation_token_ids"]
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

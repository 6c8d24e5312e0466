"""One scenario through both rollout paths, on the real vLLM: the native path (VllmHttpGeneration and the
NumberGuessEnvironment in this process) and the agent path (a real `ng_run` stack: multi_turn_agent, the
number-guessing server, vllm_model), with one generation config. A proxy in front of vLLM records what each path
asked it for: the generation settings must be the same, and so must the rollouts and their metrics.

The game's secret is 98 and the config picks the top token (top_k 1), so no game is won within the two turns the
rollouts get: every rollout runs out of turns, which both paths must count as max_turns_reached, not as a natural
termination. The row carries sampling settings of its own (as dataset rows do); the trainer's config, which sets no
temperature, must win over them on the agent path as it does natively, where there is no row.
"""

import asyncio
from typing import Any, Iterator

import orjson
import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.environments.number_guess import NumberGuessEnvironment
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.interfaces import PromptGroupRecord
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.experience.generation_support import CountingProxy
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT, Stack, math_and_game_agents

pytestmark = pytest.mark.vllm

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
TEMPLATE = ChatTemplate(TOKENIZER)
GAMES = REPO_ROOT / "nemo_gym" / "resources_servers" / "number_guess" / "data" / "example.jsonl"
ROW = orjson.loads(GAMES.read_bytes().splitlines()[1])  # secret 98
ROW = {**ROW, "responses_create_params": {**ROW["responses_create_params"], "temperature": 0.3, "top_p": 0.5}}
AGENT = "number_guess_agent"
GENERATION = {"max_new_tokens": 16, "top_k": 1}  # no temperature: the default (1.0) on both paths
N, MAX_SEQ_LEN, TURNS = 2, 2048, 2
# What a generation request says about how to generate (vLLM's names, on both /v1/completions and chat).
SETTINGS = ("temperature", "top_p", "top_k", "max_tokens", "stop", "include_stop_str_in_output", "stop_token_ids")


@pytest.fixture(scope="module")
def proxy(vllm_server: Any) -> Iterator[CountingProxy]:
    with CountingProxy(vllm_server.base_url) as running:
        yield running


@pytest.fixture(scope="module")
def stack(vllm_server: Any, proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with math_and_game_agents(proxy.base_url, vllm_server.model, tmp_path_factory.mktemp("agents")) as running:
        yield running


def _settings_sent(proxy: CountingProxy, since: int) -> list[dict[str, Any]]:
    """The generation settings of every generation request vLLM got after its first `since` requests."""
    bodies = [r["body"] for r in proxy.requests[since:] if r["path"] in ("/v1/completions", "/v1/chat/completions")]
    return [{key: body.get(key) for key in SETTINGS} for body in bodies]


def _native(vllm_server: Any, proxy: CountingProxy) -> tuple[PromptGroupRecord, list[dict[str, Any]]]:
    since = len(proxy.requests)
    backend_config = {"model_name": vllm_server.model, "max_seq_len": MAX_SEQ_LEN,
                      "pad_token_id": TOKENIZER.pad_token_id, **GENERATION}
    with VllmHttpGeneration(backend_config, proxy.base_url) as policy:
        manager = RolloutManager(TOKENIZER, {"number_guess": NumberGuessEnvironment()}, N, MAX_SEQ_LEN, TURNS,
                                 policy_generation=policy, generation_config=GENERATION)
        record = asyncio.run(manager.run_rollout(datum_from_row(ROW, TEMPLATE, "number_guess", 0)))
    return record, _settings_sent(proxy, since)


def _through_agents(stack: Stack, proxy: CountingProxy) -> tuple[PromptGroupRecord, list[dict[str, Any]]]:
    since = len(proxy.requests)
    manager = RolloutManager(TOKENIZER, {}, N, MAX_SEQ_LEN, TURNS, generation_config=GENERATION, use_nemo_gym=True,
                             head_server_url=stack.head_url, agent_name=AGENT)
    record = asyncio.run(manager.run_rollout(datum_from_row(ROW, TEMPLATE, AGENT, 0)))
    return record, _settings_sent(proxy, since)


def _token_ids(record: PromptGroupRecord) -> list[list[tuple[str, list[int]]]]:
    return [[(m["role"], m["token_ids"].tolist()) for m in c.message_log] for c in record.completions]


def test_one_scenario_means_the_same_on_both_paths(vllm_server: Any, proxy: CountingProxy, stack: Stack) -> None:
    native, native_sent = _native(vllm_server, proxy)
    agents, agents_sent = _through_agents(stack, proxy)

    expected = {"temperature": 1.0, "top_p": 1.0, "top_k": 1, "max_tokens": 16, "stop": None,
                "include_stop_str_in_output": None, "stop_token_ids": None}
    assert native_sent == [expected] * (N * TURNS)
    assert agents_sent == native_sent

    # The same rollouts, token for token: the prompt, then per turn the guess and the game's answer.
    assert _token_ids(agents) == _token_ids(native)
    assert [c.reward for c in agents.completions] == [c.reward for c in native.completions] == [0.0] * N
    assert [c.truncated for c in agents.completions] == [c.truncated for c in native.completions]

    agent_metrics = {k: v for k, v in agents.rollout_metrics.items() if k != f"{AGENT}/mean_reward"}
    assert agent_metrics == native.rollout_metrics
    assert (native.rollout_metrics["max_turns_reached_rate"], native.rollout_metrics["natural_termination_rate"],
            native.rollout_metrics["total_turns"]) == (1.0, 0.0, N * TURNS)

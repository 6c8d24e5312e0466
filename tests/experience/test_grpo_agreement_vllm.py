"""After a weight push, the trainer's log-probs of vLLM's generated tokens agree with vLLM's own (NeMo RL's
token_mult_prob_error <= 1.002, float32 on both sides), on the native path and through the agents, multi-turn
included; and a re-tokenized turn makes that check fail, so it can.

The pushed weights are the bundled model's with every trainable weight perturbed (the tied embedding stays, as in
the example trainer: vLLM's CPU build does not reload a tied lm_head). Agreement with the perturbed model and
disagreement with the original prove that vLLM really serves the pushed weights and that the comparison sees it.
"""

import asyncio
import copy
from dataclasses import dataclass
from typing import Any, Iterator

import orjson
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.environments.number_guess import NumberGuessEnvironment
from nemo_gym.experience.errors import TokenAlignmentError
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.generation.weights import write_weights
from nemo_gym.experience.grpo import completion_logprobs, token_mult_prob_error
from nemo_gym.experience.interfaces import Completion
from nemo_gym.experience.rollout_manager import RolloutManager
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.experience.weight_folders import removed_after
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT, Stack, math_and_game_agents

pytestmark = pytest.mark.vllm

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
TEMPLATE = ChatTemplate(TOKENIZER)
DATA = REPO_ROOT / "nemo_gym" / "resources_servers"
SUM = orjson.loads((DATA / "math" / "data" / "arithmetic_example.jsonl").read_bytes().splitlines()[0])
# Secret 98: the greedy first guess misses it, so greedy games take several turns by construction (sampled games
# often end after one turn, cut at max_new_tokens).
GAME = orjson.loads((DATA / "number_guess" / "data" / "example.jsonl").read_bytes().splitlines()[1])
AGREEMENT = 1.002  # float32 on both sides (tests/helpers/model.py pins the test vLLM)
N = 4
MAX_TURNS = 6


def _model() -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()


@dataclass
class Pushed:
    model: PreTrainedModel  # what vLLM serves now
    original: PreTrainedModel  # what it served before the push
    policy: VllmHttpGeneration


def perturbed_model(seed: int) -> PreTrainedModel:
    """The bundled model with every trainable weight perturbed (the tied embedding stays, see the module doc)."""
    model = _model()
    embedding = model.get_input_embeddings().weight
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter is not embedding:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.004)
    return model


def policy_config(server: Any) -> dict[str, Any]:
    return {"model_name": server.model, "max_seq_len": 2048, "pad_token_id": TOKENIZER.pad_token_id,
            "max_new_tokens": 16, "temperature": 1.0}


@pytest.fixture(scope="module")
def pushed(vllm_weights_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    original, model = _model(), perturbed_model(seed=0)
    config = policy_config(vllm_weights_server)
    with removed_after(tmp_path_factory.mktemp("weights")) as root, \
            VllmHttpGeneration(config, vllm_weights_server.base_url) as policy:
        policy.update_weights(write_weights(model, root / "v1"), 1)
        try:
            yield Pushed(model, original, policy)
        finally:  # the session's vLLM serves the bundled model again for the tests after these
            policy.update_weights(MODEL_DIR, 2)


def agreement(model: PreTrainedModel, completions: list[Completion]) -> float:
    """token_mult_prob_error over every generated token of `completions`."""
    pairs = [completion_logprobs(model, c.message_log) for c in completions]
    train, generation = torch.cat([t for t, _ in pairs]), torch.cat([g for _, g in pairs])
    return token_mult_prob_error(train, generation, torch.ones_like(train))


def _native(pushed: Pushed, row: dict, task: str, greedy: bool) -> list[Completion]:
    with MathEnvironment(num_workers=1, verify_timeout_s=300) as math_env:
        envs = {"math": math_env, "number_guess": NumberGuessEnvironment()}
        manager = RolloutManager(TOKENIZER, envs, N, 2048, MAX_TURNS, policy_generation=pushed.policy,
                                 greedy=greedy)
        return asyncio.run(manager.run_rollout(datum_from_row(row, TEMPLATE, task, 0))).completions


@pytest.fixture(scope="module")
def native_game(pushed: Pushed) -> list[Completion]:
    return _native(pushed, GAME, "number_guess", greedy=True)


@pytest.fixture(scope="module")
def stack(vllm_weights_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with math_and_game_agents(vllm_weights_server.base_url, vllm_weights_server.model,
                              tmp_path_factory.mktemp("agents")) as running:
        yield running


def _through_agents(stack: Stack, row: dict, agent: str, temperature: float) -> list[Completion]:
    generation = {"temperature": temperature, "max_new_tokens": 16}
    manager = RolloutManager(TOKENIZER, {}, N, 2048, generation_config=generation,
                             use_nemo_gym=True, head_server_url=stack.head_url, agent_name=agent)
    return asyncio.run(manager.run_rollout(datum_from_row(row, TEMPLATE, agent, 0))).completions


def _assert_agree(pushed: Pushed, completions: list[Completion], multi_turn: bool) -> None:
    if multi_turn:
        turns = [sum(m["role"] == "assistant" for m in c.message_log) for c in completions]
        assert max(turns) > 1, f"no game took several turns: {turns}"
    error = agreement(pushed.model, completions)
    assert error <= AGREEMENT, f"token_mult_prob_error {error:.4f} against the pushed weights"
    # The push changed what vLLM serves: the weights it replaced no longer explain the tokens.
    before = agreement(pushed.original, completions)
    assert before > AGREEMENT, f"the replaced weights explain vLLM's tokens too ({before:.4f}): nothing changed"


def test_native_arithmetic_agrees_after_a_push(pushed: Pushed) -> None:
    _assert_agree(pushed, _native(pushed, SUM, "math", greedy=False), multi_turn=False)


def test_native_multi_turn_game_agrees_after_a_push(pushed: Pushed, native_game: list[Completion]) -> None:
    _assert_agree(pushed, native_game, multi_turn=True)


@pytest.mark.parametrize("row, agent, temperature, multi_turn", [(SUM, "math_simple_agent", 1.0, False),
                                                                  (GAME, "number_guess_agent", 0.0, True)],
                         ids=["math", "multi_turn_game"])
def test_agent_path_agrees_after_a_push(pushed: Pushed, stack: Stack, row: dict, agent: str, temperature: float,
                                        multi_turn: bool) -> None:
    _assert_agree(pushed, _through_agents(stack, row, agent, temperature), multi_turn)


def _retokenized(ids: torch.Tensor) -> torch.Tensor:
    """What a pipeline that keeps text instead of token ids trains on: the decoded turn, encoded again."""
    return torch.tensor(TEMPLATE.encode(TEMPLATE.decode(ids)), dtype=torch.long)


def test_a_retokenized_prompt_turn_fails_the_check(pushed: Pushed, native_game: list[Completion]) -> None:
    changed = []
    for completion in native_game:
        log = copy.deepcopy(completion.message_log)
        log[0]["token_ids"] = _retokenized(log[0]["token_ids"])
        assert log[0]["token_ids"].tolist() != completion.message_log[0]["token_ids"].tolist()
        changed.append(Completion(log, None, completion.truncated, completion.reward))
    assert agreement(pushed.model, native_game) <= AGREEMENT
    assert agreement(pushed.model, changed) > AGREEMENT


def test_a_retokenized_assistant_turn_fails_the_check(pushed: Pushed, native_game: list[Completion]) -> None:
    changed, turns_changed = [], 0
    for completion in native_game:
        log = copy.deepcopy(completion.message_log)
        for message in log:
            if message["role"] == "assistant":
                ids = _retokenized(message["token_ids"])
                turns_changed += ids.tolist() != message["token_ids"].tolist()
                message["token_ids"] = ids
        changed.append(Completion(log, None, completion.truncated, completion.reward))
    assert turns_changed > 0
    try:
        error = agreement(pushed.model, changed)
    except TokenAlignmentError:
        return  # the ids no longer line up with vLLM's log-probs: refused, as it must be
    assert error > AGREEMENT

"""After a push over the gloo transport (tensors straight from the trainer's model, no folder), the trainer's
log-probs of vLLM's generated tokens agree with vLLM's own: NeMo RL's token_mult_prob_error <= 1.002 in float32, on
the native path and through the agents, multi-turn included, and above it against the replaced weights. The checks
are test_grpo_agreement_vllm.py's (which pushes through a folder), on the weights this transport pushed."""

from typing import Any, Iterator

import pytest

from nemo_gym.experience.generation import VllmHttpGeneration
from tests.experience.test_grpo_agreement_vllm import (
    GAME,
    SUM,
    Pushed,
    _assert_agree,
    _model,
    _native,
    _through_agents,
    perturbed_model,
    policy_config,
    stack,
)
from tests.helpers.stack import Stack

pytestmark = pytest.mark.vllm
__all__ = ["stack"]  # the folder transport module's fixture of the agents' stack (one stack per module)


@pytest.fixture(scope="module")
def pushed(vllm_weights_server: Any) -> Iterator[Pushed]:
    """The bundled model with every trainable weight perturbed, pushed over gloo as version 1; the bundled weights
    again afterwards."""
    original, model = _model(), perturbed_model(seed=1)
    config = policy_config(vllm_weights_server)
    with VllmHttpGeneration(config, vllm_weights_server.base_url, weight_transport="gloo") as policy:
        policy.update_weights(model, 1)
        try:
            yield Pushed(model, original, policy)
        finally:
            policy.update_weights(original, 2)


def test_native_arithmetic_agrees_after_a_gloo_push(pushed: Pushed) -> None:
    _assert_agree(pushed, _native(pushed, SUM, "math", greedy=False), multi_turn=False)


def test_native_multi_turn_game_agrees_after_a_gloo_push(pushed: Pushed) -> None:
    _assert_agree(pushed, _native(pushed, GAME, "number_guess", greedy=True), multi_turn=True)


@pytest.mark.parametrize("row, agent, temperature, multi_turn", [(SUM, "math_simple_agent", 1.0, False),
                                                                  (GAME, "number_guess_agent", 0.0, True)],
                         ids=["math", "multi_turn_game"])
def test_agent_path_agrees_after_a_gloo_push(pushed: Pushed, stack: Stack, row: dict, agent: str,
                                             temperature: float, multi_turn: bool) -> None:
    _assert_agree(pushed, _through_agents(stack, row, agent, temperature), multi_turn)

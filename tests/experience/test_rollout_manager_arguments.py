"""Every argument of the rollout managers is named: a misspelt one is a TypeError naming it, one that does not apply
to the chosen path is refused, and none is dropped without a word."""

import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.rollout_manager import AsyncNemoGymRolloutImpl, AsyncRolloutImpl, RolloutManager
from nemo_gym.rollout_collection.helper import RolloutCollectionHelper
from tests.experience.scripted import CountdownEnvironment, ScriptedGeneration
from tests.helpers.model import MODEL_DIR

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
ENVS = {"countdown": CountdownEnvironment()}
HEAD = "http://127.0.0.1:9"  # never contacted: construction does not connect
GENERATION = {"max_new_tokens": 16}


def _policy() -> ScriptedGeneration:
    return ScriptedGeneration(lambda prompt: [2])


@pytest.mark.parametrize("misspelt", ["head_server", "agent", "temprature", "end_on_truncated_turns"])
def test_a_misspelt_argument_is_a_type_error_naming_it(misspelt: str) -> None:
    with pytest.raises(TypeError, match=misspelt):
        RolloutManager(TOKENIZER, ENVS, 2, 2048, generation_config=GENERATION, use_nemo_gym=True,
                       **{misspelt: "http://10.0.0.1:11000"})
    with pytest.raises(TypeError, match=misspelt):
        RolloutManager(TOKENIZER, ENVS, 2, 2048, policy_generation=_policy(), **{misspelt: 1})
    with pytest.raises(TypeError, match=misspelt):
        AsyncRolloutImpl(TOKENIZER, ENVS, 2, 2048, _policy(), **{misspelt: 1})
    with pytest.raises(TypeError, match=misspelt):
        AsyncNemoGymRolloutImpl(TOKENIZER, ENVS, 2, 2048, GENERATION, **{misspelt: 1})


def test_the_head_server_given_is_the_one_used() -> None:
    manager = RolloutManager(TOKENIZER, {}, 2, 2048, generation_config=GENERATION, use_nemo_gym=True,
                             head_server_url="http://127.0.0.1:12345")
    assert isinstance(manager.impl, AsyncNemoGymRolloutImpl)
    assert manager.impl.rollout_helper.head_server_url == "http://127.0.0.1:12345"


def test_end_on_truncated_turn_is_refused_through_the_agents() -> None:
    with pytest.raises(ValueError, match="end_on_truncated_turn=True cannot be honoured through the agent servers"):
        RolloutManager(TOKENIZER, {}, 2, 2048, generation_config=GENERATION, use_nemo_gym=True, head_server_url=HEAD,
                       end_on_truncated_turn=True)
    native = RolloutManager(TOKENIZER, ENVS, 2, 2048, policy_generation=_policy(), end_on_truncated_turn=True)
    assert isinstance(native.impl, AsyncRolloutImpl) and native.impl.end_on_truncated_turn is True


@pytest.mark.parametrize("agent_only", [{"agent_name": "math_simple_agent"}, {"head_server_url": HEAD},
                                        {"rollout_helper": None}], ids=["agent_name", "head_server_url",
                                                                        "rollout_helper"])
def test_the_agent_paths_arguments_are_refused_natively(agent_only: dict) -> None:
    if "rollout_helper" in agent_only:
        agent_only = {"rollout_helper": RolloutCollectionHelper(HEAD)}
    [name] = agent_only
    with pytest.raises(ValueError, match=f"{name}: only for rollouts through the agent servers"):
        RolloutManager(TOKENIZER, ENVS, 2, 2048, policy_generation=_policy(), **agent_only)


def test_the_agent_path_needs_max_new_tokens_and_one_way_to_its_servers() -> None:
    with pytest.raises(ValueError, match="GenerationConfig lacks max_new_tokens"):
        RolloutManager(TOKENIZER, {}, 2, 2048, generation_config={"temperature": 1.0}, use_nemo_gym=True,
                       head_server_url=HEAD)
    with pytest.raises(ValueError, match="head_server_url or rollout_helper, not both"):
        RolloutManager(TOKENIZER, {}, 2, 2048, generation_config=GENERATION, use_nemo_gym=True, head_server_url=HEAD,
                       rollout_helper=RolloutCollectionHelper(HEAD))

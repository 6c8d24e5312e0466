"""A trainer's generation settings as a NeMo Gym row's create params (the agent path), without servers: the
real-stack tests in test_rollout_manager_agents_vllm.py show vLLM receiving and obeying them."""

import pytest

from nemo_gym.experience.agents.params import agent_request_params
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.generation.samples import SampleRequest
from nemo_gym.protocol import MAX_SEQ_LEN_PARAM, MAX_TURNS_PARAM, RETURN_TOKENS_PARAM

ROW = {"input": "What is 2 + 2?", "stop": "###", "top_k": 40, "max_output_tokens": 99}
CONFIG = {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "max_new_tokens": 16, "stop_strings": ["\n"],
          "stop_token_ids": [7]}


def test_sampled_settings_stops_and_limits() -> None:
    params = agent_request_params(ROW, CONFIG, greedy=False, stop_strings=["!", "\n"], max_seq_len=512,
                                  max_rollout_turns=3)
    assert params == {"input": "What is 2 + 2?", "temperature": 0.7, "top_p": 0.9, "top_k": 5,
                      "max_output_tokens": 16, "stop": ["###", "\n", "!"], "include_stop_str_in_output": True,
                      "stop_token_ids": [7], RETURN_TOKENS_PARAM: True, MAX_SEQ_LEN_PARAM: 512, MAX_TURNS_PARAM: 3}
    assert ROW["top_k"] == 40  # the row itself is left as it was


def test_greedy_is_temperature_0_without_top_k() -> None:
    params = agent_request_params(ROW, CONFIG, greedy=True, stop_strings=None, max_seq_len=512,
                                  max_rollout_turns=None)
    assert (params["temperature"], params["top_p"], "top_k" in params, MAX_TURNS_PARAM in params) == (
        0.0, 1.0, False, False)


def test_the_configs_settings_replace_the_rows_own() -> None:
    """With no temperature, top_p or top_k in the config, the defaults apply, as on the native path: the row's own
    sampling fields do not survive."""
    row = {"input": "x", "temperature": 0.3, "top_p": 0.5, "top_k": 40, "seed": 7}
    params = agent_request_params(row, {"max_new_tokens": 16}, greedy=False, stop_strings=None, max_seq_len=512,
                                  max_rollout_turns=None)
    assert (params["temperature"], params["top_p"], "top_k" in params, params["seed"]) == (1.0, 1.0, False, 7)


@pytest.mark.parametrize("config", [{}, {"temperature": 0.7}, {"temperature": 0.7, "top_p": 0.9, "top_k": 5},
                                    {"top_k": 0, "stop_token_ids": [7, 9]}, {"top_k": -1, "temperature": 0.0}])
@pytest.mark.parametrize("greedy", [False, True])
def test_both_paths_send_the_same_settings(config: dict, greedy: bool) -> None:
    """The agent path's create params (which vllm_model passes on to vLLM unchanged) and the native path's vLLM
    request (VllmHttpGeneration's body) carry the same settings for one config."""
    config = {"max_new_tokens": 16, **config}
    backend = VllmHttpGeneration({"model_name": "m", "max_seq_len": 512, "pad_token_id": 2, **config},
                                 "http://127.0.0.1:9/v1")
    native = backend._body(SampleRequest(index=0, prompt_ids=[1], max_new_tokens=16, stop_strings=["\n"]), greedy)
    agent = agent_request_params({"input": "x", "temperature": 0.3, "top_k": 40}, config, greedy=greedy,
                                 stop_strings=["\n"], max_seq_len=512, max_rollout_turns=None)
    keys = ("temperature", "top_p", "top_k", "stop", "include_stop_str_in_output", "stop_token_ids")
    assert {key: native.get(key) for key in keys} == {key: agent.get(key) for key in keys}
    assert native["max_tokens"] == agent["max_output_tokens"] == 16

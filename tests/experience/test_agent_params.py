"""A trainer's generation settings as a NeMo Gym row's create params (the agent path), without servers: the
real-stack tests in test_rollout_manager_agents_vllm.py show vLLM receiving and obeying them."""

from nemo_gym.experience.agents.params import agent_request_params
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

"""A trainer's generation settings as the create params of a NeMo Gym row sent through the agent servers.

The agent path generates the way the native path does: the config's settings, with the defaults of
generation/settings.py, replace the row's own `temperature`, `top_p` and `top_k` (a row without a trainer has no
say in how the policy samples, and on the native path there is no row), and `max_new_tokens` becomes
`max_output_tokens`. Stop strings are the row's own `stop`, then the config's, then the sample's, kept in the output
as on the native path; the config's stop_token_ids are added to the row's. Two limits of ours go along
(protocol.MAX_SEQ_LEN_PARAM, MAX_TURNS_PARAM): vllm_model keeps every prompt + generation within max_seq_len, and
the agent makes at most max_rollout_turns model calls. NeMo RL instead refuses greedy, top_k, stop strings and
max_rollout_turns on this path and relies on vLLM's max_model_len.
"""

from typing import Any, Optional, Sequence

from nemo_gym.experience.generation.interfaces import GenerationConfig
from nemo_gym.experience.generation.samples import merge_stop_strings
from nemo_gym.experience.generation.settings import SAMPLING_FIELDS, sampling_of, stop_fields, stop_token_ids_of
from nemo_gym.protocol import MAX_SEQ_LEN_PARAM, MAX_TURNS_PARAM, RETURN_TOKENS_PARAM


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return [value] if isinstance(value, (str, int)) else list(value)


def agent_request_params(row_params: dict[str, Any], config: GenerationConfig, *, greedy: bool,
                         stop_strings: Optional[Sequence[str]], max_seq_len: int,
                         max_rollout_turns: Optional[int]) -> dict[str, Any]:
    """`row_params` (the row's responses_create_params) with the trainer's settings applied; `config` must have
    `max_new_tokens`."""
    params = {key: value for key, value in row_params.items() if key not in SAMPLING_FIELDS}
    params.update(sampling_of(config, greedy=greedy).request_fields())
    params["max_output_tokens"] = config["max_new_tokens"]
    stops = merge_stop_strings(merge_stop_strings(_as_list(params.pop("stop", None)), config.get("stop_strings")),
                               stop_strings)
    params.update(stop_fields(stops))
    stop_ids = list(dict.fromkeys([*_as_list(params.get("stop_token_ids")), *stop_token_ids_of(config)]))
    if stop_ids:
        params["stop_token_ids"] = stop_ids
    params[RETURN_TOKENS_PARAM] = True
    params[MAX_SEQ_LEN_PARAM] = max_seq_len
    if max_rollout_turns:
        params[MAX_TURNS_PARAM] = max_rollout_turns
    return params

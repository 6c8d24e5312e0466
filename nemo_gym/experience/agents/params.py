"""A trainer's generation settings as the create params of a NeMo Gym row sent through the agent servers.

The agent path samples the way the native path does (VllmHttpGeneration): greedy is temperature 0 with top_p 1 and
no top_k; otherwise the config's temperature, top_p and top_k (> 0) apply. Stop strings are the row's own `stop`,
then the config's, then the sample's, kept in the output like on the native path (`include_stop_str_in_output`);
the config's stop_token_ids are added to the row's. max_new_tokens becomes `max_output_tokens`. Two limits of ours
go along (protocol.MAX_SEQ_LEN_PARAM, MAX_TURNS_PARAM): vllm_model keeps every prompt + generation within
max_seq_len, and the agent makes at most max_rollout_turns model calls. NeMo RL instead refuses greedy, top_k, stop
strings and max_rollout_turns on this path and relies on vLLM's max_model_len.
"""

from typing import Any, Optional, Sequence

from nemo_gym.experience.generation.interfaces import GenerationConfig
from nemo_gym.protocol import MAX_SEQ_LEN_PARAM, MAX_TURNS_PARAM, RETURN_TOKENS_PARAM


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return [value] if isinstance(value, (str, int)) else list(value)


def agent_request_params(row_params: dict[str, Any], config: GenerationConfig, *, greedy: bool,
                         stop_strings: Optional[Sequence[str]], max_seq_len: int,
                         max_rollout_turns: Optional[int]) -> dict[str, Any]:
    """`row_params` (the row's responses_create_params) with the trainer's settings applied."""
    params = dict(row_params)
    if greedy:
        params.update(temperature=0.0, top_p=1.0)
        params.pop("top_k", None)
    else:
        for key in ("temperature", "top_p"):
            if config.get(key) is not None:
                params[key] = config[key]
        if (config.get("top_k") or 0) > 0:
            params["top_k"] = config["top_k"]
    if config.get("max_new_tokens") is not None:
        params["max_output_tokens"] = config["max_new_tokens"]
    stops = list(dict.fromkeys([*_as_list(params.get("stop")), *_as_list(config.get("stop_strings")),
                                *_as_list(stop_strings)]))
    if stops:
        params.update(stop=stops, include_stop_str_in_output=True)
    stop_ids = list(dict.fromkeys([*_as_list(params.get("stop_token_ids")), *_as_list(config.get("stop_token_ids"))]))
    if stop_ids:
        params["stop_token_ids"] = stop_ids
    params[RETURN_TOKENS_PARAM] = True
    params[MAX_SEQ_LEN_PARAM] = max_seq_len
    if max_rollout_turns:
        params[MAX_TURNS_PARAM] = max_rollout_turns
    return params

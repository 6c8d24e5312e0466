"""A generation config given to a native rollout whose backend was built with a config of its own (the trajectory
collector's `policy.generation` with the trainer's `policy_generation`): every setting takes effect, or the rollout
is refused before it starts.

Two settings travel with each request, which every backend honours (the per-sample cap and stop strings of the
generation input; backend_compat.conform_outputs cuts a backend that ignores the cap): `max_new_tokens` and
`stop_strings`. The others only the backend applies (generation/settings.py, BACKEND_ONLY_KEYS: temperature, top_p,
top_k, stop_token_ids), so they must be what the backend's own config (`config`, or NeMo RL's `cfg`) gives, with the
shared defaults; so must a `max_new_tokens` above the backend's, which a per-sample cap cannot raise.
"""

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from nemo_gym.experience.errors import UnsupportedBackendError
from nemo_gym.experience.generation.settings import BACKEND_ONLY_KEYS, SAMPLING_FIELDS, mismatches
from nemo_gym.experience.turns.backend_compat import backend_config


@dataclass(frozen=True)
class GenerationLimits:
    """What a rollout adds to each generation request: a cap on new tokens, and stop strings besides the sample's."""

    max_new_tokens: Optional[int] = None
    stop_strings: tuple[str, ...] = ()


NO_LIMITS = GenerationLimits()


def generation_limits(config: Optional[Mapping[str, Any]], backend: Any, *, greedy: bool) -> GenerationLimits:
    """The limits of `config` for rollouts on `backend`; ValueError naming every setting the backend would not apply
    (sampling ones are moot when `greedy`), UnsupportedBackendError when it has no config to check them against."""
    if not config:
        return NO_LIMITS
    checked = {key: value for key, value in config.items() if not (greedy and key in SAMPLING_FIELDS)}
    own = backend_config(backend)
    name = type(backend).__name__
    if own is None:
        named = [key for key in BACKEND_ONLY_KEYS if checked.get(key) is not None]
        if named:
            raise UnsupportedBackendError(
                f"the generation config sets {', '.join(named)}, which only the backend applies, and {name} has no "
                f"config (`config`, or NeMo RL's `cfg`) to check them against: build the backend with them")
    else:
        found = mismatches(checked, own)
        if found:
            raise ValueError(f"the generation config and the config {name} generates with disagree "
                             f"(generation config vs backend): {'; '.join(found)}")
    cap = config.get("max_new_tokens")
    return GenerationLimits(max_new_tokens=None if cap is None else int(cap),
                            stop_strings=tuple(config.get("stop_strings") or ()))

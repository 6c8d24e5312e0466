"""The asynchronous collector's settings: the part of NeMo RL's master config it reads, under NeMo RL's key names,
plus our additions to `grpo.async_grpo`.

Each key is one field below, and its docstring is its meaning. `parse_master_config` is the one reader: every value is
checked (strict types: no "yes" for true, no 2.5 for an integer) and every default applied, and a bad value is a
`CollectorConfigError` (the package's `ConfigError`) naming its dotted key, e.g. `grpo.async_grpo.group_timeout_s
must be positive, got -1`. Keys the collector does not read (the rest of NeMo RL's config) are left alone; one a
typo away from a key of `grpo.async_grpo` is refused, since it would otherwise be ignored.

This is one of two trees of settings, beside `rollout_collection/config.py` (the `ng_*` commands'), and the two must
stay apart: this one reads NeMo RL's master config under NeMo RL's key names, that one a Hydra command line under
ours, and no key is in both. What they share is defined once, in `nemo_gym/config/typed.py`: the strict base,
`build` and the unknown-key check.
"""

from typing import Annotated, Any, Mapping, Optional

from pydantic import BeforeValidator, Field

from nemo_gym.config.timeouts import GROUP_TIMEOUT_S
from nemo_gym.config.typed import Settings, build, check_unknown_keys, nowhere
from nemo_gym.errors import ConfigError
from nemo_gym.experience.errors import CollectorConfigError


def _plain_dict(value: Any) -> Any:
    # A NeMo RL config may come as an OmegaConf DictConfig, a Mapping that is not a dict.
    return dict(value) if isinstance(value, Mapping) else value


class AsyncGRPOConfig(Settings):
    """`grpo.async_grpo`: NeMo RL's asynchronous GRPO keys, then ours."""

    max_trajectory_age_steps: int = Field(ge=1)
    """A: data generated on weight version v trains steps v+1 … v+A."""
    in_flight_weight_updates: bool = False
    """Refit without waiting for running generations (they go on, tagged with the version they started on)."""
    recompute_kv_cache_after_weight_updates: bool = False
    """After an in-flight refit, call `policy_generation.invalidate_kv_cache()` so running generations recompute
    their cached keys and values with the new weights."""
    max_concurrent_groups: Optional[int] = Field(None, ge=1)
    """Prompt groups generating at once; null: num_prompts_per_step x max_trajectory_age_steps, as NeMo RL."""
    group_timeout_s: Optional[float] = Field(GROUP_TIMEOUT_S, gt=0)
    """A group running longer is a straggler: cancelled, and retried as a failed attempt. Null disables it, and a
    hung group then blocks its step forever."""
    max_group_attempts: int = Field(3, ge=1)
    """Attempts per prompt before it is reported failed (`get_failed_groups()`) and its slot given to the next."""
    max_consecutive_failures: Optional[int] = Field(None, ge=1)
    """Failed attempts in a row that mean the engine is dead (the trainer's wait then raises CollectorDiedError);
    null: max(16, 2 x max_concurrent_groups), as one wave of running groups failing together is a blip and two
    waves in a row are not."""
    max_epochs: Optional[int] = Field(None, ge=1)
    """Passes over the dataloader, then DataExhaustedError; null: endless. Absent: `grpo.max_num_epochs`."""
    shutdown_grace_s: float = Field(10.0, ge=0)
    """How long `shutdown()` waits for cancelled groups to finish."""


class GRPOConfig(Settings):
    """`grpo`: the keys of NeMo RL's GRPO section the collector reads."""

    num_prompts_per_step: int = Field(ge=1)
    """P: prompt groups a training step takes."""
    num_generations_per_prompt: int = Field(ge=1)
    """Completions in each prompt group."""
    max_rollout_turns: Optional[int] = Field(None, ge=1)
    """Turns a rollout may take; null: until the environment ends it."""
    max_num_epochs: Optional[int] = Field(None, ge=1)
    """NeMo RL's epoch limit, used when `grpo.async_grpo.max_epochs` is absent."""
    async_grpo: AsyncGRPOConfig

    @property
    def concurrent_groups(self) -> int:
        """`async_grpo.max_concurrent_groups` with its default applied."""
        window = self.num_prompts_per_step * self.async_grpo.max_trajectory_age_steps
        return self.async_grpo.max_concurrent_groups or window

    @property
    def consecutive_failures_limit(self) -> int:
        """`async_grpo.max_consecutive_failures` with its default applied."""
        return self.async_grpo.max_consecutive_failures or max(16, 2 * self.concurrent_groups)

    @property
    def epochs(self) -> Optional[int]:
        """`async_grpo.max_epochs` if given (an explicit null: endless), else `max_num_epochs`."""
        given = "max_epochs" in self.async_grpo.model_fields_set
        return self.async_grpo.max_epochs if given else self.max_num_epochs

    @property
    def min_buffer_size(self) -> int:
        """Groups the collector may hold at once (targets v … v+A, full): a smaller buffer could fill with later
        targets while the trainer waits on the current one."""
        return self.num_prompts_per_step * (self.async_grpo.max_trajectory_age_steps + 1)


class PolicyConfig(Settings):
    """`policy`: the keys of NeMo RL's policy section the collector reads."""

    max_total_sequence_length: int = Field(ge=1)
    """Tokens a rollout may hold, prompt included."""
    generation: Optional[Annotated[dict[str, Any], BeforeValidator(_plain_dict)]] = None
    """The GenerationConfig handed to the rollout manager (temperature, max_new_tokens, stop strings, …)."""


class EnvConfig(Settings):
    """`env`: how rollouts reach their environments."""

    should_use_nemo_gym: bool = False
    """Roll out through the agent servers (`AsyncNemoGymRolloutImpl`) instead of in process."""


class MasterConfig(Settings):
    """The part of NeMo RL's MasterConfig the collector reads."""

    grpo: GRPOConfig
    policy: PolicyConfig
    env: EnvConfig = EnvConfig()


def parse_master_config(master_config: Mapping[str, Any]) -> MasterConfig:
    """The collector's settings from a NeMo RL master config (a mapping), or a CollectorConfigError naming each bad
    key."""
    if not isinstance(master_config, Mapping):
        raise CollectorConfigError(f"master config must be a mapping, got {master_config!r}")
    grpo = master_config.get("grpo")
    async_grpo = grpo.get("async_grpo") if isinstance(grpo, Mapping) else None
    try:
        if isinstance(async_grpo, Mapping):
            check_unknown_keys(AsyncGRPOConfig, [str(k) for k in async_grpo], "near_miss",
                               lambda key: f"grpo.async_grpo.{key}", nowhere)
        return build(MasterConfig, master_config, name=str)
    except ConfigError as exc:
        raise CollectorConfigError(f"master config: {exc}") from None

"""The asynchronous collector's settings, parsed once from a NeMo RL master config.

`MasterConfig` and its sections are the part of NeMo RL's `MasterConfig` the collector reads, under NeMo RL's key
names, plus our additions to `grpo.async_grpo`; keys the collector does not read are left alone. `parse_master_config`
is the one reader: it checks every value and applies every default, and a bad value is a `CollectorConfigError` (the
package's `ConfigError`) naming its key.

Keys (NeMo RL's names where it has them):
  grpo.num_prompts_per_step, grpo.num_generations_per_prompt, grpo.max_rollout_turns (optional),
  grpo.max_num_epochs (optional, used when async_grpo.max_epochs is absent)
  grpo.async_grpo.max_trajectory_age_steps      A: data generated on version v trains steps v+1 … v+A
  grpo.async_grpo.in_flight_weight_updates      refit without waiting for running generations (default False)
  grpo.async_grpo.recompute_kv_cache_after_weight_updates
                                                call policy_generation.invalidate_kv_cache() after an in-flight
                                                refit (default False)
  Our additions, all optional:
  grpo.async_grpo.max_concurrent_groups         prompt groups generating at once (default P x A, as the reference)
  grpo.async_grpo.group_timeout_s               a group running longer is a straggler: cancelled and retried
                                                (default 600; null disables, and a hung group then blocks its step)
  grpo.async_grpo.max_group_attempts            attempts per prompt before it is reported failed (default 3)
  grpo.async_grpo.max_consecutive_failures      failed attempts in a row that mean the engine is dead (default
                                                max(16, 2 x max_concurrent_groups): one wave of running groups
                                                failing together is a blip, two waves in a row is not)
  grpo.async_grpo.max_epochs                    passes over the dataloader; null = endless (default)
  grpo.async_grpo.shutdown_grace_s              how long shutdown waits for cancelled groups (default 10)
  policy.max_total_sequence_length, policy.generation (the GenerationConfig dict)
  env.should_use_nemo_gym                       roll out through the agent servers (default False)
"""

from dataclasses import dataclass
from typing import Any, Mapping, NotRequired, Optional, TypedDict

from nemo_gym.experience.errors import CollectorConfigError
from nemo_gym.experience.generation.interfaces import GenerationConfig


class AsyncGRPOConfig(TypedDict):
    max_trajectory_age_steps: int
    in_flight_weight_updates: NotRequired[bool]
    recompute_kv_cache_after_weight_updates: NotRequired[bool]
    max_concurrent_groups: NotRequired[Optional[int]]
    group_timeout_s: NotRequired[Optional[float]]
    max_group_attempts: NotRequired[int]
    max_consecutive_failures: NotRequired[Optional[int]]
    max_epochs: NotRequired[Optional[int]]
    shutdown_grace_s: NotRequired[float]


class GRPOConfig(TypedDict):
    num_prompts_per_step: int
    num_generations_per_prompt: int
    max_rollout_turns: NotRequired[Optional[int]]
    max_num_epochs: NotRequired[Optional[int]]
    async_grpo: AsyncGRPOConfig


class PolicyConfig(TypedDict):
    max_total_sequence_length: int
    generation: NotRequired[Optional[GenerationConfig]]


class EnvConfig(TypedDict):
    should_use_nemo_gym: NotRequired[bool]


class MasterConfig(TypedDict):
    grpo: GRPOConfig
    policy: PolicyConfig
    env: NotRequired[EnvConfig]


@dataclass(frozen=True)
class AsyncCollectorConfig:
    """The collector's settings with every default applied and every value checked (see parse_master_config)."""

    num_prompts_per_step: int
    num_generations_per_prompt: int
    max_trajectory_age_steps: int
    max_total_sequence_length: int
    generation_config: Mapping[str, Any]
    max_rollout_turns: Optional[int]
    use_nemo_gym: bool
    in_flight_weight_updates: bool
    recompute_kv_cache_after_weight_updates: bool
    max_concurrent_groups: int
    group_timeout_s: Optional[float]
    max_group_attempts: int
    max_consecutive_failures: int
    max_epochs: Optional[int]
    shutdown_grace_s: float

    @property
    def min_buffer_size(self) -> int:
        """Groups the collector may hold at once (targets v … v+A, full): a smaller buffer could fill with later
        targets while the trainer waits on the current one."""
        return self.num_prompts_per_step * (self.max_trajectory_age_steps + 1)


_REQUIRED: Any = object()


class _Section:
    """One mapping of the master config, read key by key; each value is checked and named by its dotted key."""

    def __init__(self, values: Any, name: str = "") -> None:
        if not isinstance(values, Mapping):
            where = f": {name}" if name else ""
            raise CollectorConfigError(f"master config{where} must be a mapping, got {values!r}")
        self.values = values
        self.name = name

    def _key(self, key: str) -> str:
        return f"{self.name}.{key}" if self.name else key

    def _raw(self, key: str, default: Any, nullable: bool) -> tuple[bool, Any]:
        """(True, value) for a value to check; (False, result) for an absent key's default or an allowed null."""
        if key not in self.values:
            if default is _REQUIRED:
                raise CollectorConfigError(f"master config: missing required key {self._key(key)}")
            return False, default
        value = self.values[key]
        if value is None:
            if not nullable:
                raise CollectorConfigError(f"master config: {self._key(key)} must not be null")
            return False, None
        return True, value

    def _invalid(self, key: str, should: str, value: Any) -> CollectorConfigError:
        return CollectorConfigError(f"master config: {self._key(key)} must be {should}, got {value!r}")

    def section(self, key: str, *, optional: bool = False) -> "_Section":
        """The mapping under `key`; an optional one that is absent or null reads as empty."""
        present, value = self._raw(key, {} if optional else _REQUIRED, nullable=optional)
        return _Section(value if present else {}, self._key(key))

    def count(self, key: str, default: Any = _REQUIRED, *, nullable: bool = False) -> Optional[int]:
        """An integer >= 1 (a bool is not one)."""
        present, value = self._raw(key, default, nullable)
        if present and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise self._invalid(key, "an integer >= 1" + (" or null" if nullable else ""), value)
        return value

    def seconds(self, key: str, default: Any, *, nullable: bool = False, zero: bool = False) -> Optional[float]:
        """A number of seconds, positive (or >= 0 with `zero`)."""
        present, value = self._raw(key, default, nullable)
        if not present:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not zero):
            should = "a number >= 0" if zero else "a positive number"
            raise self._invalid(key, should + (" or null" if nullable else ""), value)
        return value

    def flag(self, key: str, default: bool) -> bool:
        present, value = self._raw(key, default, nullable=False)
        if present and not isinstance(value, bool):
            raise self._invalid(key, "true or false", value)
        return value

    def mapping(self, key: str) -> Mapping[str, Any]:
        """The mapping under `key` as it is (absent or null: empty)."""
        return self.section(key, optional=True).values


def parse_master_config(master_config: Mapping[str, Any]) -> AsyncCollectorConfig:
    """The collector's settings from a NeMo RL master config: every key checked, every default applied here."""
    root = _Section(master_config)
    grpo = root.section("grpo")
    async_grpo = grpo.section("async_grpo")
    policy = root.section("policy")
    env = root.section("env", optional=True)
    prompts = grpo.count("num_prompts_per_step")
    age = async_grpo.count("max_trajectory_age_steps")
    concurrent = async_grpo.count("max_concurrent_groups", None, nullable=True) or prompts * age
    return AsyncCollectorConfig(
        num_prompts_per_step=prompts,
        num_generations_per_prompt=grpo.count("num_generations_per_prompt"),
        max_trajectory_age_steps=age,
        max_total_sequence_length=policy.count("max_total_sequence_length"),
        generation_config=policy.mapping("generation"),
        max_rollout_turns=grpo.count("max_rollout_turns", None, nullable=True),
        use_nemo_gym=env.flag("should_use_nemo_gym", False),
        in_flight_weight_updates=async_grpo.flag("in_flight_weight_updates", False),
        recompute_kv_cache_after_weight_updates=async_grpo.flag("recompute_kv_cache_after_weight_updates", False),
        max_concurrent_groups=concurrent,
        group_timeout_s=async_grpo.seconds("group_timeout_s", 600.0, nullable=True),
        max_group_attempts=async_grpo.count("max_group_attempts", 3),
        max_consecutive_failures=(async_grpo.count("max_consecutive_failures", None, nullable=True)
                                  or max(16, 2 * concurrent)),
        # An explicit null in async_grpo means endless, even when grpo.max_num_epochs is set.
        max_epochs=async_grpo.count("max_epochs", grpo.count("max_num_epochs", None, nullable=True), nullable=True),
        shutdown_grace_s=async_grpo.seconds("shutdown_grace_s", 10.0, zero=True),
    )

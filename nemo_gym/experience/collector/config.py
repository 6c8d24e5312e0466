"""The asynchronous collector's settings, read once from a NeMo RL style master config.

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
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class AsyncCollectorConfig:
    num_prompts_per_step: int
    num_generations_per_prompt: int
    max_trajectory_age_steps: int
    max_total_sequence_length: int
    generation_config: Mapping[str, Any]
    max_concurrent_groups: int
    max_rollout_turns: Optional[int] = None
    use_nemo_gym: bool = False
    in_flight_weight_updates: bool = False
    recompute_kv_cache_after_weight_updates: bool = False
    group_timeout_s: Optional[float] = 600.0
    max_group_attempts: int = 3
    max_consecutive_failures: int = 16
    max_epochs: Optional[int] = None
    shutdown_grace_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("num_prompts_per_step", "num_generations_per_prompt", "max_trajectory_age_steps",
                     "max_concurrent_groups", "max_group_attempts", "max_consecutive_failures"):
            if getattr(self, name) < 1:
                raise ValueError(f"grpo.async_grpo / grpo: {name} must be >= 1, got {getattr(self, name)}")
        if self.group_timeout_s is not None and self.group_timeout_s <= 0:
            raise ValueError(f"grpo.async_grpo.group_timeout_s must be positive or null, got {self.group_timeout_s}")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1 or null, got {self.max_epochs}")

    @property
    def min_buffer_size(self) -> int:
        """Groups the collector may hold at once (targets v … v+A, full): a smaller buffer could fill with later
        targets while the trainer waits on the current one."""
        return self.num_prompts_per_step * (self.max_trajectory_age_steps + 1)

    @classmethod
    def from_master_config(cls, master_config: Mapping[str, Any]) -> "AsyncCollectorConfig":
        grpo = master_config["grpo"]
        async_cfg = grpo["async_grpo"]
        policy = master_config["policy"]
        prompts = int(grpo["num_prompts_per_step"])
        age = int(async_cfg["max_trajectory_age_steps"])
        concurrent = int(async_cfg.get("max_concurrent_groups") or prompts * age)
        return cls(
            num_prompts_per_step=prompts,
            num_generations_per_prompt=int(grpo["num_generations_per_prompt"]),
            max_trajectory_age_steps=age,
            max_total_sequence_length=int(policy["max_total_sequence_length"]),
            generation_config=policy.get("generation") or {},
            max_rollout_turns=grpo.get("max_rollout_turns"),
            use_nemo_gym=bool((master_config.get("env") or {}).get("should_use_nemo_gym", False)),
            in_flight_weight_updates=bool(async_cfg.get("in_flight_weight_updates", False)),
            recompute_kv_cache_after_weight_updates=bool(
                async_cfg.get("recompute_kv_cache_after_weight_updates", False)),
            max_concurrent_groups=concurrent,
            group_timeout_s=async_cfg.get("group_timeout_s", 600.0),
            max_group_attempts=int(async_cfg.get("max_group_attempts", 3)),
            max_consecutive_failures=int(async_cfg.get("max_consecutive_failures") or max(16, 2 * concurrent)),
            max_epochs=async_cfg.get("max_epochs", grpo.get("max_num_epochs")),
            shutdown_grace_s=float(async_cfg.get("shutdown_grace_s", 10.0)),
        )

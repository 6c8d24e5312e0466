"""NeMo RL's `nemo_rl.experience.rollouts` under our package name: the multi-turn rollout functions of
`nemo_gym.experience.turns.rollouts` (docs/trainers.md, "NeMo RL's import paths")."""

from nemo_gym.experience.turns.rollouts import (
    calculate_rewards,
    calculate_rewards_async,
    generate_responses,
    generate_responses_async,
    run_async_multi_turn_rollout,
    run_multi_turn_rollout,
    run_sample_multi_turn_rollout,
)

__all__ = [
    "calculate_rewards",
    "calculate_rewards_async",
    "generate_responses",
    "generate_responses_async",
    "run_async_multi_turn_rollout",
    "run_multi_turn_rollout",
    "run_sample_multi_turn_rollout",
]

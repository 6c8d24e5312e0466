"""NeMo RL's `nemo_rl.algorithms.async_utils` under our package name: `nemo_gym.experience.collector`'s
AsyncTrajectoryCollector and ReplayBuffer (docs/trainers.md, "NeMo RL's import paths")."""

from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector

__all__ = ["AsyncTrajectoryCollector", "ReplayBuffer"]

"""NeMo RL's `nemo_rl.algorithms.async_utils.trajectory_collector` under our package name."""

from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector

__all__ = ["AsyncTrajectoryCollector"]

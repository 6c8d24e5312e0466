"""NeMo RL's `nemo_rl.algorithms.async_utils.replay_buffer` under our package name."""

from nemo_gym.experience.collector.replay_buffer import ReplayBuffer

__all__ = ["ReplayBuffer"]

"""NeMo RL's `nemo_rl.environments.interfaces` under our package name."""

from nemo_gym.experience.environments.interfaces import EnvironmentInterface, EnvironmentReturn

__all__ = ["EnvironmentInterface", "EnvironmentReturn"]

"""NeMo RL's `nemo_rl.data.interfaces` under our package name: the datum and message types of
`nemo_gym.experience.interfaces`."""

from nemo_gym.experience.interfaces import DatumSpec, LLMMessage, LLMMessageLogType

__all__ = ["DatumSpec", "LLMMessage", "LLMMessageLogType"]

"""Asynchronous RL: generation runs ahead of training on older weights and feeds a replay buffer.

- `trajectory_collector`: `AsyncTrajectoryCollector`, which keeps prompt groups generating for the next steps;
- `replay_buffer`: `ReplayBuffer`, prompt groups tagged with the weight versions that made them and are meant for;
- `prompt_source`, `prompt_loader`: prompts one at a time across epochs; `StatefulPromptLoader`, a resumable loader;
- `config`: the collector's settings, parsed once from a NeMo RL master config;
- `checkpoint`, `metrics`: the one-file checkpoint; the counters and failed groups it reports.
"""

from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector

__all__ = ["AsyncTrajectoryCollector", "ReplayBuffer", "StatefulPromptLoader"]

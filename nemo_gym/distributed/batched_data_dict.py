"""NeMo RL's `nemo_rl.distributed.batched_data_dict` under our package name."""

from nemo_gym.experience.batched_data_dict import BatchedDataDict

__all__ = ["BatchedDataDict"]

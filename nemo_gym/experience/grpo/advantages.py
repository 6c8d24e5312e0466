"""Group-normalized advantages (GRPO): each completion's reward against the other completions of its prompt.

NeMo RL's `normalize_rewards` with the plain group mean as baseline: A = (r - mean(group)) / (std(group) + eps),
std being the population standard deviation of the group. A group whose rewards are all equal gets advantage 0
for every completion: it carries no signal about which completion was better.
"""

import torch

EPS = 1e-6


def group_advantages(rewards: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Advantages for `rewards` of shape (groups, completions per group), same shape, float32."""
    if rewards.dim() != 2 or rewards.shape[1] < 1:
        raise ValueError(f"rewards must be (groups, completions per group), got shape {tuple(rewards.shape)}")
    rewards = rewards.to(torch.float32)
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, unbiased=False, keepdim=True)
    return (rewards - mean) / (std + eps)

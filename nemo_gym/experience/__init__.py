"""The trainer-facing experience layer: token-level multi-turn rollouts, RolloutManager, trajectory collection.

From the bottom up: interfaces / batched_data_dict / errors (data and failures), generation/ (policies),
environments/ (rewards), turns/ (token-level turn loops), agents/ (the bridge to the agent servers),
rollout_manager (one prompt group at a time, natively or through the agents), datasets (NeMo Gym rows as prompts),
collector/ (asynchronous RL: trajectory collector, replay buffer, prompts), grpo/ (a GRPO trainer's math).
"""

"""The trainer-facing experience layer: token-level multi-turn rollouts, RolloutManager, trajectory collection.

Modules, from the bottom up: interfaces / batched_data_dict / errors (data and failures), generation/ (policies),
environments/ (rewards), chat_template and message_log (token bookkeeping), rollouts (turn loops),
rollout_manager (one prompt group at a time), replay_buffer and trajectory_collector (asynchronous RL).
"""

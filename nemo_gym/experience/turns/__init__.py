"""Token-level multi-turn rollouts: a policy's turns against environments, every token kept exactly.

- `rollouts`: the turn loops (batched, or each sample its own) and their rewards;
- `chat_template`: token ids of chat messages, observations spliced onto the exact generated tokens;
- `message_log`: message logs as token sequences (flatten, pad, the chat view environments get);
- `backend_compat`: what the loops need from a generation backend, also from one written for NeMo RL;
- `rollout_metrics`: NeMo RL's rollout metric keys and how batches of them combine.
"""

"""NeMo RL's `nemo_rl.algorithms` names under our package name; only `async_utils` (the trajectory collector and its
replay buffer) exists here (docs/trainers.md, "NeMo RL's import paths")."""

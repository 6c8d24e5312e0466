"""NeMo RL's `nemo_rl.environments` names under our package name; only `interfaces` exists here (our environments
are in `nemo_gym.experience.environments`)."""

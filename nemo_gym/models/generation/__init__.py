"""NeMo RL's `nemo_rl.models.generation` names under our package name; only `interfaces` exists here."""

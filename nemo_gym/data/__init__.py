"""NeMo RL's `nemo_rl.data` names under our package name; only `interfaces` exists here."""

"""NeMo RL's `nemo_rl.models` names under our package name; only `generation.interfaces` exists here (our backends
are in `nemo_gym.experience.generation`)."""

"""NeMo RL's `nemo_rl.distributed` names under our package name; only `batched_data_dict` exists here."""

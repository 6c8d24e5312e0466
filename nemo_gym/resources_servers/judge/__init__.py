"""An LLM judge: the reward comes from a judge model, a model server of its own in the config."""

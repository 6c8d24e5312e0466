"""Scaffolding: `ng_init_resources_server` writes a new, working environment folder from the templates here."""

from nemo_gym.scaffold.new_environment import ScaffoldError, create_environment, model_config_path

__all__ = ["ScaffoldError", "create_environment", "model_config_path"]

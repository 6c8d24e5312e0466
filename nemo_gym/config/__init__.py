"""Configuration: Hydra-style overrides, YAML merging, the server tree and secret redaction."""

from nemo_gym.config.loader import GlobalConfig, load_global_config
from nemo_gym.config.redact import redact_secrets, secret_values
from nemo_gym.config.servers import SERVER_KINDS, ServerRef, ServerSpec, parse_server_tree, server_specs

__all__ = [
    "GlobalConfig",
    "load_global_config",
    "redact_secrets",
    "secret_values",
    "SERVER_KINDS",
    "ServerRef",
    "ServerSpec",
    "parse_server_tree",
    "server_specs",
]

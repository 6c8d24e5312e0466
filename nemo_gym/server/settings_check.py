"""Check every server's settings as its implementation types them, before ng_run starts anything."""

from nemo_gym.config.loader import GlobalConfig
from nemo_gym.config.servers import ServerSettings
from nemo_gym.server.base import server_settings
from nemo_gym.server.launch import server_class


def check_server_settings(config: GlobalConfig) -> dict[str, ServerSettings]:
    """Every server's typed settings, by instance name; a ConfigError for the first server whose implementation is
    missing or whose settings are wrong, naming the setting, what it should be, and the file and line that set it."""
    return {name: server_settings(server_class(spec), spec, config.source_of)
            for name, spec in config.servers().items()}

"""Top-level settings every config-loading command reads: which files to merge and where the head server is."""

from pydantic import Field

from nemo_gym.config.typed import Settings, Text
from nemo_gym.server.client import DEFAULT_HEAD_HOST, DEFAULT_HEAD_PORT


class HeadServerSettings(Settings):
    host: Text = DEFAULT_HEAD_HOST
    """Address of the head server, which lists every running server."""
    port: int = Field(DEFAULT_HEAD_PORT, ge=1, le=65535)
    """Its port (NeMo Gym's default; give each concurrent ng_run its own)."""


class LoaderSettings(Settings):
    config_paths: list[Text] = Field(default_factory=list)
    """YAML files merged in order (then env.yaml, then the command line); each file's own config_paths follow it."""
    head_server: HeadServerSettings = Field(default_factory=HeadServerSettings)
    print_config: bool = False
    """Print the merged, resolved config (secrets redacted) and exit without running anything."""


class RunSettings(LoaderSettings):
    log_dir: Text | None = None
    """Folder for each server's log (default ng_logs/<date-time>)."""

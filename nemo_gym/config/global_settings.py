"""Top-level settings every config-loading command reads: which files to merge and where the head server is."""

from typing import Any, Callable, Mapping

from pydantic import Field

from nemo_gym.config.traces import TracesSettings
from nemo_gym.config.typed import Settings, Text, build, nowhere


class HeadServerSettings(Settings):
    host: Text = "127.0.0.1"
    """Address of the head server, which lists every running server."""
    port: int = Field(11000, ge=1, le=65535)
    """Its port (NeMo Gym's default; give each concurrent ng_run its own)."""

    @property
    def url(self) -> str:
        """Where servers and clients reach it: the one place its address is written."""
        return f"http://{self.host}:{self.port}"


class LoaderSettings(Settings):
    config_paths: list[Text] = Field(default_factory=list)
    """YAML files merged in order (then env.yaml, then the command line); each file's own config_paths follow it."""
    head_server: HeadServerSettings = Field(default_factory=HeadServerSettings)
    print_config: bool = False
    """Print the merged, resolved config (secrets redacted) and exit without running anything."""
    traces: TracesSettings = Field(default_factory=TracesSettings)


class ServerProcessSettings(Settings):
    """How the commands that start servers (ng_run, ng_e2e_collect_rollouts) lay them out in processes."""

    colocate_servers: bool = False
    """Run the servers in one process, where they call each other without HTTP (docs/performance.md, "Servers in
    one process"). They run as one process, all of them on one core, with one log file (colocated.log, each line
    naming its server), and each one's settings, secrets included, are in the memory of all. Never with traces on,
    nor for a server that sets `own_process` or more than one worker."""


class RunSettings(LoaderSettings, ServerProcessSettings):
    log_dir: Text | None = None
    """Folder for each server's log (default ng_logs/<date-time>)."""


def head_server(values: Mapping[str, Any], where: Callable[[str], str | None] = nowhere) -> HeadServerSettings:
    """The `head_server` section of a config's top-level values, typed (its defaults where absent); a bad value is a
    ConfigError naming its key (+head_server.port)."""
    return build(LoaderSettings, values, where=where).head_server

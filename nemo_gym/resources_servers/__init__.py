"""Resources servers: environments that serve tools to the model and verify its responses."""

from nemo_gym.resources_servers.base import ResourcesServer, tool

__all__ = ["ResourcesServer", "tool"]

"""Resources servers: environments that serve tools to the model and verify its responses."""

from typing import TYPE_CHECKING

from nemo_gym.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from nemo_gym.resources_servers.base import ResourcesServer, tool

__all__ = ["ResourcesServer", "tool"]
__getattr__ = lazy_exports(__name__, {name: "nemo_gym.resources_servers.base" for name in __all__})

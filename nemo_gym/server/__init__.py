"""Server framework: one base class for every server, the head server, and lookup of servers by name."""

from typing import TYPE_CHECKING

from nemo_gym.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from nemo_gym.server.base import BaseServer, HandlerError, json_route
    from nemo_gym.server.client import ServerClient

__all__ = ["BaseServer", "HandlerError", "json_route", "ServerClient"]
__getattr__ = lazy_exports(__name__, {
    **dict.fromkeys(("BaseServer", "HandlerError", "json_route"), "nemo_gym.server.base"),
    "ServerClient": "nemo_gym.server.client",
})

"""Server framework: one base class for every server, the head server, and lookup of servers by name."""

from nemo_gym.server.base import BaseServer, HandlerError, json_route
from nemo_gym.server.client import ServerClient

__all__ = ["BaseServer", "HandlerError", "json_route", "ServerClient"]

"""The servers that run in this process, by name, with the routes another server here may call without HTTP.

Filled by the process that serves several of ng_run's servers together (server/colocated.py) and read by
`ServerClient.post`; empty in every other process, where each call goes over HTTP.
"""

from dataclasses import dataclass
from typing import Callable

from nemo_gym.http_client import InProcess


@dataclass(frozen=True)
class Here:
    # By route path: the route's URL over HTTP (failures name it, as an HTTP call's would) and its answer.
    answers: dict[str, tuple[str, InProcess]]
    serving: Callable[[], bool]  # false until its start-up is done (its port does not listen before either)


_SERVERS: dict[str, Here] = {}


def add(name: str, here: Here) -> None:
    _SERVERS[name] = here


def answer_of(name: str, path: str) -> tuple[str, InProcess] | None:
    """The URL of route `path` of server `name` and its answer, when that server runs in this process and serves
    (otherwise the call goes over HTTP, and fails as it would)."""
    here = _SERVERS.get(name)
    if here is None or not here.serving():
        return None
    return here.answers.get(path)

"""Several of ng_run's servers in one process, calling each other without HTTP.

A rollout crosses five HTTP hops between the agent, its environment and the model server (seed_session, a model
call, a tool call, another model call, verify); each costs a request's encoding, two system calls per side and an
event loop wake-up in two processes. Servers in one process answer each other's JSON routes directly
(`ServerClient.post` finds them in `in_process`): the body is encoded and decoded as it would be on the wire, so a
handler never shares an object with its caller, and every failure reads as over HTTP (`json_answer`,
`http_client.json_reply`). Each server still serves its own port, for the collector and everything outside.

Off by default (`+colocate_servers=true` turns it on, `colocated_names` says for which servers): one process uses
one core, and its servers share one log file (each line names the server whose code wrote it:
`logs.SERVING`).
"""

import asyncio
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import uvicorn
import uvloop
from starlette.requests import Request

from nemo_gym import console
from nemo_gym.config.servers import ServerSettings
from nemo_gym.http_client import InProcess
from nemo_gym.open_files import allow_open_files_up_to_hard_limit
from nemo_gym.server import in_process
from nemo_gym.server.base import BaseServer, JsonHandler, json_answer
from nemo_gym.server.logs import SERVING
from nemo_gym.server.workers import reuseport_socket


def colocated_names(classes: Mapping[str, type[BaseServer]], settings: Mapping[str, ServerSettings], colocate: bool,
                    tracing: bool) -> list[str]:
    """The servers ng_run runs in one process (none, or two or more), in config order: with `colocate`, every server
    but one that sets `own_process`, more than one worker or its own `serve`, each as one process. Never with traces
    on: a span per hop is made where HTTP is served."""
    if not colocate or tracing:
        return []
    names = [name for name, cls in classes.items()
             if not settings[name].own_process and settings[name].workers in (None, 1)
             and cls.serve is BaseServer.serve]
    return names if len(names) >= 2 else []


def _answer(name: str, path: str, handler: JsonHandler) -> InProcess:
    async def answer(raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        request = Request({"type": "http", "method": "POST", "path": path, "query_string": b"",
                           "headers": [(key.lower().encode("latin-1"), value.encode("latin-1"))
                                       for key, value in headers.items()]})
        serving = SERVING.set(name)  # what the callee logs is its own, as in a process of its own
        try:
            return await json_answer(path, handler, raw, request)
        finally:
            SERVING.reset(serving)

    return answer


def _started(server: uvicorn.Server) -> Callable[[], bool]:
    return lambda: server.started


class _Member(uvicorn.Server):
    """One server of the group: the group's loop takes the signals, for all of them at once."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _serve_one(name: str, server: uvicorn.Server, sock: socket.socket) -> None:
    SERVING.set(name)  # this task's own context: what it serves, and every task that starts from it, logs as `name`
    try:
        await server.serve(sockets=[sock])
    except SystemExit:  # how uvicorn ends a server whose start-up failed (it logged why): the group stops
        pass


async def _serve_all(servers: list[BaseServer]) -> int:
    members = []
    for server in servers:
        host, port = server.settings.host, server.settings.port
        assert port is not None, "the supervisor sets every server's port"
        member = _Member(server.uvicorn_config(host, port))  # builds the server's app, and its json_handlers
        members.append((server, member, reuseport_socket(host, port)))
        in_process.add(server.name, in_process.Here(
            {path: (f"http://{host}:{port}{path}", _answer(server.name, path, handler))
             for path, handler in server.json_handlers.items()}, serving=_started(member)))
    stopping = asyncio.Event()

    def stop() -> None:
        stopping.set()
        for _, uvicorn_server, _ in members:
            uvicorn_server.should_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    tasks = {asyncio.create_task(_serve_one(server.name, uvicorn_server, sock)): server.name
             for server, uvicorn_server, sock in members}
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    failed = [] if stopping.is_set() else [tasks[task] for task in done]
    stop()  # one server that ends (its start-up failed) ends them all: ng_run then sees the group exit
    await asyncio.gather(*tasks, return_exceptions=True)
    if failed:
        console.error(f"server {', '.join(failed)} stopped on its own; its group ({', '.join(tasks.values())}) "
                      f"stops with it")
        return 1
    return 0


def serve_together(servers: list[BaseServer]) -> None:
    """Serve `servers` in this process until SIGTERM/SIGINT; exit 1 when one of them stops on its own."""
    allow_open_files_up_to_hard_limit()
    sys.exit(uvloop.run(_serve_all(servers)))

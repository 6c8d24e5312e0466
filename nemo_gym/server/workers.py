"""Several processes serving one server's port, for servers that keep nothing between requests.

Each worker binds a socket of its own to the port with SO_REUSEPORT, and the kernel spreads incoming connections
over them. The process ng_run started only forks the workers, passes SIGTERM and SIGINT on to them and exits once
they have: a worker that fails takes the others down with it, so ng_run sees the server fail rather than serve at a
fraction of what it was given.
"""

import os
import signal
import socket
import sys
import traceback
from typing import Callable

from nemo_gym.server.process_group import die_with_parent


def reuseport_socket(host: str, port: int, *, reuse_address: bool = True) -> socket.socket:
    """A TCP socket bound to `host`:`port` (a free one for 0) that other processes' sockets of this user may share:
    the workers of one server, and the supervisor's reservation of its port (bound, never listening, so it takes no
    connection). uvicorn listens on it once the server has started, so no connection reaches a worker that is not
    ready. With `reuse_address`, like uvicorn's own socket, it binds a port whose old connections linger in TIME_WAIT;
    without, a SO_REUSEADDR probe of the port (supervisor.port_is_free) sees it taken."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    if reuse_address:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def serve_workers(serve_one: Callable[[socket.socket], None], host: str, port: int, workers: int) -> int:
    """Fork `workers` processes that each run `serve_one` on a shared-port socket; the exit status for this one."""
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            die_with_parent()
            status = 0
            try:
                serve_one(reuseport_socket(host, port))
            except BaseException:  # noqa: BLE001 - a worker's failure is reported and becomes its exit status
                traceback.print_exc(file=sys.stderr)
                status = 1
            finally:
                os._exit(status)
        children.append(pid)

    stopped_by: set[int] = set()

    def pass_on(signum: int, frame: object) -> None:
        stopped_by.add(signum)
        for child in children:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, pass_on)
    signal.signal(signal.SIGINT, pass_on)
    status = 0
    running = set(children)
    while running:
        pid, wait_status = os.wait()
        running.discard(pid)
        code = os.waitstatus_to_exitcode(wait_status)
        # uvicorn ends a graceful stop by re-raising the signal it caught: the worker dies of the signal passed on.
        if code != 0 and -code not in stopped_by and status == 0:
            status = code if code > 0 else 1
            pass_on(signal.SIGTERM, None)
    return status

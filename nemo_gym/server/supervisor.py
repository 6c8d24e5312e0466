"""Start the head server and one subprocess per server instance; wait until healthy; stop them all, no orphans.

Each child runs in its own process group (so grandchildren such as a vLLM engine are stopped with it) and asks the
kernel to SIGTERM it if the supervisor dies, even by SIGKILL.
"""

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Container

import orjson
import uvicorn

from nemo_gym import console
from nemo_gym.config.global_settings import LoaderSettings, ServerProcessSettings, head_server
from nemo_gym.config.loader import GlobalConfig
from nemo_gym.config.redact import secret_values
from nemo_gym.config.servers import ServerSettings, ServerSpec
from nemo_gym.config.timeouts import SERVER_STOP_GRACE_S
from nemo_gym.config.typed import build
from nemo_gym.errors import ConfigError, DownstreamError
from nemo_gym.http_client import RequestFailed, get_blocking
from nemo_gym.server.head import HEAD_SERVER_NAME, HeadServer
from nemo_gym.server.launch import HEAD_URL_ENV, SPEC_ENV
from nemo_gym.server.logs import register_secrets
from nemo_gym.server.colocated import colocated_names
from nemo_gym.server.settings_check import check_server_settings, server_classes
from nemo_gym.server.startup_progress import PROGRESS_EVERY_S, Starting, last_log_line, waiting_line
from nemo_gym.server.process_group import die_with_parent, stop_process_groups
from nemo_gym.server.workers import reuseport_socket
from nemo_gym.traces.start import child_environment, require_extra


TOGETHER_LOG = "colocated"  # the log of the servers that share a process


class ServerStartError(DownstreamError):
    """A server exited or never became healthy during start-up (its log says why)."""


@dataclass
class ServerProcess:
    spec: ServerSpec
    settings: ServerSettings  # typed, with the port it was given
    url: str
    log_path: Path
    popen: subprocess.Popen | None = None
    started_at: float = 0.0  # time.monotonic() when its process started
    together_with: tuple[str, ...] = ()  # the servers its process serves with it (server/colocated.py), itself too

    @property
    def label(self) -> str:
        """How messages name its process: the server, or every server that shares it."""
        if not self.together_with:
            return f"server '{self.spec.name}'"
        return f"servers {', '.join(repr(name) for name in self.together_with)} (one process)"


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As uvicorn binds: a port whose old connections linger in TIME_WAIT is free to serve again.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _reserve_port(server: str, host: str, port: int | None) -> socket.socket:
    """Hold `server`'s port (a free one for None) until the run stops. A free port found and released could be handed
    out again before its server binds it, to another server of this run or of another run; servers bind with
    SO_REUSEPORT, so both would serve it, each answering part of the other's requests. A held port is given to no
    bind(0), and another run's port_is_free sees it taken."""
    # A configured port that port_is_free passed and this refuses has old connections in TIME_WAIT of a listener
    # without SO_REUSEPORT, which only a SO_REUSEADDR socket may bind over.
    tries = (False,) if port is None else (False, True)
    for reuse_address in tries:
        try:
            return reuseport_socket(host, port or 0, reuse_address=reuse_address)
        except OSError as exc:
            error = exc
    raise ConfigError(f"no port for server '{server}' on {host}: {error}")


def _reserve_port_besides(server: str, host: str, taken: Container[int]) -> socket.socket:
    """Hold a free port for `server` that is none of `taken`: the head server's port is not held (it binds it itself,
    after planning), so bind(0) may hand it out."""
    passed_over: list[socket.socket] = []
    try:
        while True:
            reservation = _reserve_port(server, host, None)
            if reservation.getsockname()[1] not in taken:
                return reservation
            passed_over.append(reservation)  # held meanwhile: bind(0) hands out another
    finally:
        for spare in passed_over:
            spare.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, released at once. Kept beside `_reserve_port` for a port that is named to a process before
    that process binds it itself (ng_view's own server, a head server port on another command's line, the tests'
    stacks): the port may be handed out again in between, so ng_run's servers, which bind with SO_REUSEPORT and would
    then share it silently, take a held reservation instead; a plain bind that loses the race fails loudly."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Supervisor:
    """Owns every server process of one `ng_run`."""

    def __init__(self, config: GlobalConfig, log_dir: Path) -> None:
        self.config = config
        self.log_dir = log_dir
        self.head = head_server(config.values)
        self.head_url = self.head.url
        loader = build(LoaderSettings, config.values, where=config.source_of)
        if loader.traces.traces_url:
            require_extra()
        self._traces_env = child_environment(loader.traces)  # every server traces as the config says
        self._reservations: list[socket.socket] = []  # each planned server's port, held until stop()
        # A bad setting fails here, before any server starts.
        try:
            classes = server_classes(config)
            settings = check_server_settings(config, classes=classes)
            layout = build(ServerProcessSettings, config.values, where=config.source_of)
            together = colocated_names(classes, settings, layout.colocate_servers,
                                       tracing=loader.traces.traces_url is not None)
            self.processes = self._plan(config.servers(), settings, tuple(together))
        except BaseException:
            self._release_ports()
            raise
        register_secrets(secret_values(config.values))  # the servers' last log lines are shown while they start
        self._head: uvicorn.Server | None = None
        self._head_thread: threading.Thread | None = None

    def _plan(self, specs: dict[str, ServerSpec], settings: dict[str, ServerSettings],
              together: tuple[str, ...]) -> list[ServerProcess]:
        """Assign ports (free ones unless set) and refuse ports that are already taken, before starting anything."""
        taken: dict[int, str] = {self.head.port: HEAD_SERVER_NAME}
        if not port_is_free(self.head.host, self.head.port):
            raise ConfigError(
                f"port {self.head.port} for the head server is already in use (another ng_run?); "
                f"set +head_server.port=..."
            )
        plan = []
        for spec in specs.values():
            host, port = settings[spec.name].host, settings[spec.name].port
            if port is not None:
                where = self.config.source_of(f"{spec.name}.{spec.kind}.{spec.implementation}.port")
                if port in taken:
                    raise ConfigError(f"port {port} of server '{spec.name}' ({where}) is also used by '{taken[port]}'")
                if not port_is_free(host, port):
                    raise ConfigError(f"port {port} of server '{spec.name}' ({where}) is already in use")
            reservation = (_reserve_port(spec.name, host, port) if port is not None
                           else _reserve_port_besides(spec.name, host, taken))
            self._reservations.append(reservation)
            port = reservation.getsockname()[1]
            taken[port] = spec.name
            plan.append(
                ServerProcess(
                    spec=replace(spec, settings={**spec.settings, "host": host, "port": port}),
                    settings=settings[spec.name].model_copy(update={"port": port}),
                    url=f"http://{host}:{port}",
                    log_path=self.log_dir / (f"{TOGETHER_LOG}.log" if spec.name in together else f"{spec.name}.log"),
                    together_with=together if spec.name in together else (),
                )
            )
        return plan

    def listing(self) -> list[dict[str, Any]]:
        return [
            {"name": p.spec.name, "kind": p.spec.kind, "implementation": p.spec.implementation, "url": p.url}
            for p in self.processes
        ]

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._start_head()
        together = [p for p in self.processes if p.together_with]
        for unit in ([together] if together else []) + [[p] for p in self.processes if not p.together_with]:
            first = unit[0]
            env = {
                **os.environ,
                # A list of specs: the servers that share the process (server/colocated.py).
                SPEC_ENV: orjson.dumps([p.spec.__dict__ for p in unit] if first.together_with
                                       else first.spec.__dict__).decode(),
                HEAD_URL_ENV: self.head_url,
                **self._traces_env,
                "PYTHONUNBUFFERED": "1",
            }
            with open(first.log_path, "ab") as log:
                popen = subprocess.Popen(
                    [sys.executable, "-m", "nemo_gym.server.launch"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
            started_at = time.monotonic()
            for proc in unit:
                proc.popen, proc.started_at = popen, started_at

    def _start_head(self) -> None:
        head = HeadServer(self.config.values, self.listing(), (self.head.host, self.head.port), self.starting)
        config = uvicorn.Config(
            head.app(), host=self.head.host, port=self.head.port, log_config=None, access_log=False, loop="asyncio"
        )
        self._head = uvicorn.Server(config)
        self._head_thread = threading.Thread(target=self._head.run, name="head_server", daemon=True)
        self._head_thread.start()

    def starting(self, name: str) -> Starting | None:
        """How long server `name` has been starting and what it logged last (None for a name not started here)."""
        proc = next((p for p in self.processes if p.spec.name == name and p.popen), None)
        if proc is None:
            return None
        return Starting(name, time.monotonic() - proc.started_at, last_log_line(proc.log_path))

    def wait_healthy(self, say: Callable[[str], None] | None = None) -> None:
        """Block until every server answers /health, or raise naming the first that died or timed out. Every
        PROGRESS_EVERY_S, `say` gets a line naming the servers still starting and what each logged last."""
        pending = {p.spec.name: p for p in self.processes}
        deadlines = {p.spec.name: time.monotonic() + p.settings.startup_timeout_s for p in self.processes}
        self._wait_head()
        say = say or console.say
        next_progress = time.monotonic() + PROGRESS_EVERY_S
        while pending:
            if time.monotonic() >= next_progress:
                starting = [found for name in pending if (found := self.starting(name)) is not None]
                say(waiting_line(starting, len(self.processes)))
                next_progress = time.monotonic() + PROGRESS_EVERY_S
            for name, proc in list(pending.items()):
                assert proc.popen is not None, "start() has started every process"
                code = proc.popen.poll()
                if code is not None:
                    raise ServerStartError(
                        f"{proc.label} exited with code {code} during start-up; log {proc.log_path}:\n"
                        f"{_log_tail(proc.log_path)}"
                    )
                if answers(f"{proc.url}/health"):
                    del pending[name]
                    continue
                if time.monotonic() > deadlines[name]:
                    raise ServerStartError(
                        f"server '{name}' did not become healthy at {proc.url} in time; log {proc.log_path}:\n"
                        f"{_log_tail(proc.log_path)}"
                    )
            time.sleep(0.2)

    def _wait_head(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if answers(f"{self.head_url}/health"):
                return
            time.sleep(0.05)
        raise ServerStartError(f"head server did not start on {self.head_url}")

    def exited(self) -> ServerProcess | None:
        """The first server process that has exited, if any."""
        return next((p for p in self.processes if p.popen and p.popen.poll() is not None), None)

    def _release_ports(self) -> None:
        for reservation in self._reservations:
            reservation.close()
        self._reservations.clear()

    def stop(self) -> None:
        """SIGTERM every process group, wait, then SIGKILL what is left. Safe to call twice."""
        popens = {id(p.popen): p.popen for p in self.processes if p.popen}  # a group's process once
        stop_process_groups(list(popens.values()), SERVER_STOP_GRACE_S)
        self._release_ports()
        if self._head and self._head_thread:  # both are set together
            self._head.should_exit = True
            self._head_thread.join(timeout=5)
            self._head = None


def answers(url: str) -> bool:
    """Whether `url` answers 200 within 2 s."""
    try:
        return get_blocking(url, timeout_s=2.0)[0] == 200
    except RequestFailed:
        return False

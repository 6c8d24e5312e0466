"""ng_run holds every planned server's port from planning until it stops (supervisor._reserve_port): no second server,
of this run or of another, is given it, and the server itself binds it. Before, a port found free was released and
could be handed out twice; both servers bound it (SO_REUSEPORT) and each answered part of the other's requests."""

import socket
import time
from pathlib import Path

import pytest

from nemo_gym.config import load_global_config
from nemo_gym.errors import ConfigError
from nemo_gym.server.supervisor import Supervisor, port_is_free
from nemo_gym.server.workers import reuseport_socket
from tests.helpers.stack import free_port, plain_bind_refused

SERVERS = 6


def _plan(tmp_path: Path, name: str, ports: dict[str, int] | None = None) -> Supervisor:
    ports = ports or {}
    settings = {f"s{i}": f"port: {ports[f's{i}']}" if f"s{i}" in ports else "" for i in range(SERVERS)}
    text = "".join(f"{name}:\n  resources_servers:\n    math: {{{value}}}\n" for name, value in settings.items())
    (tmp_path / f"{name}.yaml").write_text(text)
    config = load_global_config([f"+config_paths=[{name}.yaml]", f"+head_server.port={free_port()}"], cwd=tmp_path)
    return Supervisor(config, tmp_path / f"{name}-logs")  # plans only: nothing starts



def test_planned_ports_are_distinct_and_held_until_stop(tmp_path: Path) -> None:
    supervisor = _plan(tmp_path, "a")
    ports = [process.settings.port for process in supervisor.processes]
    assert len(set(ports)) == SERVERS
    assert all(port is not None and not port_is_free("127.0.0.1", port) and plain_bind_refused(port)
               for port in ports)
    supervisor.stop()
    assert all(port is not None and port_is_free("127.0.0.1", port) for port in ports)


def test_another_run_is_refused_a_held_port(tmp_path: Path) -> None:
    first = _plan(tmp_path, "first")
    try:
        held = first.processes[2].settings.port
        assert held is not None
        with pytest.raises(ConfigError, match=rf"port {held} of server 's0' .* is already in use"):
            _plan(tmp_path, "second", {"s0": held})
        second = _plan(tmp_path, "third")  # free ports: none of the first run's
        assert not {p.settings.port for p in second.processes} & {p.settings.port for p in first.processes}
        second.stop()
    finally:
        first.stop()


def test_the_server_binds_its_held_port_and_takes_every_connection(tmp_path: Path) -> None:
    supervisor = _plan(tmp_path, "a")
    try:
        port = supervisor.processes[0].settings.port
        assert port is not None
        with reuseport_socket("127.0.0.1", port) as server:  # as the launched server binds (server/launch.py)
            server.listen()
            server.settimeout(10)
            for _ in range(20):  # the reservation never listens: every connection reaches the server
                with socket.create_connection(("127.0.0.1", port), timeout=10):
                    server.accept()[0].close()
    finally:
        supervisor.stop()


def test_a_configured_port_with_old_connections_in_time_wait_is_planned(tmp_path: Path) -> None:
    with socket.socket() as listener:  # a listener without SO_REUSEPORT, as other programs bind
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted = listener.accept()[0]
        accepted.close()  # the server's side closes first: its end lingers in TIME_WAIT on `port`
        deadline = time.monotonic() + 10
        while client.recv(1) and time.monotonic() < deadline:  # wait for the FIN (state, not the clock)
            pass
        client.close()
    assert plain_bind_refused(port) and port_is_free("127.0.0.1", port)  # the case the fallback is for
    supervisor = _plan(tmp_path, "a", {"s0": port})  # held with SO_REUSEADDR here, as uvicorn would bind it
    assert supervisor.processes[0].settings.port == port
    supervisor.stop()


def test_a_free_port_is_never_the_head_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # bind(0) may hand out the head server's port, which is free until the head binds it after planning; here it does,
    # for the first server, by construction. Before, that server was planned on the head's port and ng_run failed.
    from nemo_gym.server import supervisor as supervisor_module

    head_port = free_port()
    handed_out: list[int] = []
    reserve = supervisor_module._reserve_port

    def head_port_first(server: str, host: str, port: int | None) -> socket.socket:
        chosen = head_port if port is None and not handed_out else port
        sock = reserve(server, host, chosen)
        handed_out.append(sock.getsockname()[1])
        return sock

    monkeypatch.setattr(supervisor_module, "_reserve_port", head_port_first)
    (tmp_path / "one.yaml").write_text("s0:\n  resources_servers:\n    math: {}\n")
    config = load_global_config(["+config_paths=[one.yaml]", f"+head_server.port={head_port}"], cwd=tmp_path)
    supervisor = Supervisor(config, tmp_path / "logs")
    try:
        assert handed_out[0] == head_port
        assert supervisor.processes[0].settings.port not in (None, head_port)
        assert port_is_free("127.0.0.1", head_port)  # the passed-over reservation is let go: the head binds it
    finally:
        supervisor.stop()

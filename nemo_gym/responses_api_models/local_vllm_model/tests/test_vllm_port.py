"""local_vllm_model holds vLLM's port from before vLLM starts until the server stops, as ng_run holds every server's
(tests/servers/test_port_reservation.py): no one else is given it meanwhile, and vLLM binds it all the same. vLLM is
a stand-in here that binds as vLLM does, only once the test has looked at the port (a file it waits for)."""

import asyncio
import socket
import sys
import time
from pathlib import Path

import pytest

from nemo_gym.config.servers import ServerSpec
from nemo_gym.responses_api_models.local_vllm_model.app import LocalVLLMModelServer
from tests.helpers.stack import plain_bind_refused

WAIT_S = 60.0

# Binds the port with SO_REUSEADDR, as vLLM's create_server_socket does (and SO_REUSEPORT when argv[2] is 1, as older
# vLLMs and several API servers do), then answers GET /v1/models. It never exits on its own: the server under test
# exits its process when vLLM does.
STAND_IN = r"""
import socket, struct, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

port, reuse_port, go = int(sys.argv[1]), sys.argv[2] == "1", Path(sys.argv[3])
while not go.exists():
    time.sleep(0.01)
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if reuse_port:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
try:
    sock.bind(("127.0.0.1", port))
except OSError as exc:
    print(f"cannot bind {port}: {exc}", file=sys.stderr, flush=True)
    time.sleep(3600)


class Models(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client closes first, so no TIME_WAIT stays on the port

    def setup(self):
        self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # nor once killed
        super().setup()

    def do_GET(self):
        body = b'{"object": "list", "data": []}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", port), Models, bind_and_activate=False)
server.socket.close()
server.socket = sock
server.server_activate()
server.serve_forever()
"""


class StandInVLLM(LocalVLLMModelServer):
    def __init__(self, go: Path, reuse_port: bool) -> None:
        super().__init__(ServerSpec("policy_model", "responses_api_models", "local_vllm_model", {"model_path": "m"}))
        self.go, self.reuse_port = go, reuse_port

    def vllm_command(self, port: int) -> list[str]:
        return [sys.executable, "-c", STAND_IN, str(port), "1" if self.reuse_port else "0", str(self.go)]



@pytest.mark.parametrize("reuse_port", [False, True], ids=["reuseaddr", "reuseaddr_and_reuseport"])
def test_vllms_port_is_held_until_shutdown_and_vllm_serves_on_it(tmp_path: Path, reuse_port: bool) -> None:
    server = StandInVLLM(tmp_path / "go", reuse_port)

    async def main() -> int:
        async with server._lifespan(None):  # what serving does: start-up, then shutdown at the end
            port = int(server.base_urls[0].rsplit(":", 1)[1].split("/")[0])
            assert plain_bind_refused(port)  # held before vLLM has bound it
            server.go.touch()
            deadline = time.monotonic() + WAIT_S
            while not server.ready():  # vLLM bound the held port and answered /v1/models there
                assert time.monotonic() < deadline, "vLLM did not serve on its port"
                await asyncio.sleep(0.05)
            assert await server.http.get_json(f"{server.base_urls[0]}/models") == {"object": "list", "data": []}
        return port

    port = asyncio.run(main())
    assert not plain_bind_refused(port)  # let go once the server stopped

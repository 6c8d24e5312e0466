"""The blocking GET of nemo_gym.http_client (start-up polls, ng_status) over a real loopback server: status and body,
JSON errors and transport failures as RequestFailed, and the same call from inside a running event loop."""

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from nemo_gym.http_client import RequestFailed, get_blocking, get_json_blocking
from nemo_gym.server.supervisor import free_port


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, body = {"/ok": (200, b'{"status": "ok"}'), "/text": (200, b"not json")}.get(
            self.path, (503, b'{"detail": "starting"}'))
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        thread.join()
        httpd.server_close()


def test_status_body_and_json(server: str) -> None:
    assert get_blocking(f"{server}/ok") == (200, b'{"status": "ok"}')
    assert get_blocking(f"{server}/starting")[0] == 503
    assert get_json_blocking(f"{server}/ok") == {"status": "ok"}
    with pytest.raises(RequestFailed) as starting:
        get_json_blocking(f"{server}/starting")
    assert (starting.value.failure_class, starting.value.status) == ("http_5xx", 503)
    with pytest.raises(RequestFailed) as text:
        get_json_blocking(f"{server}/text")
    assert text.value.failure_class == "invalid_response"


def test_nothing_listening_is_a_connect_failure() -> None:
    with pytest.raises(RequestFailed) as refused:
        get_blocking(f"http://127.0.0.1:{free_port()}/health", timeout_s=2)
    assert refused.value.failure_class == "connect"


def test_works_from_inside_a_running_event_loop(server: str) -> None:
    async def inside() -> tuple[int, bytes]:
        return get_blocking(f"{server}/ok")

    assert asyncio.run(inside()) == (200, b'{"status": "ok"}')

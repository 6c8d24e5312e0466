"""External endpoints through a forward proxy, against a proxy and a TLS endpoint the test starts on loopback.

`api.test` stands for a hosted API: only the test proxy knows it (as the endpoint's loopback port), and where a test
sends to it direct, a stand-in resolver maps it to 127.0.0.1. Nothing leaves loopback.
"""

import asyncio
import base64
import gzip
import logging
import socket
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

import pytest
import uvloop

from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient
from tests.helpers.forward_proxy import ForwardProxy, JsonEndpoint, header, self_signed_cert

API_KEY = "sk-never-show-this"
PROXY_USER, PROXY_PASSWORD = "alice", "pr0xy-s3cret"
PROXY_ENV = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "ALL_PROXY",
             "all_proxy")
RUNNERS: dict[str, Callable[[Awaitable[Any]], Any]] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.fixture
def cert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A self-signed certificate for api.test and localhost, trusted by the client (SSL_CERT_FILE); no proxy
    variable of the machine's is left set."""
    for name in PROXY_ENV:
        monkeypatch.delenv(name, raising=False)
    pair = self_signed_cert(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(pair[0]))
    return pair


@pytest.fixture
def api_test_resolves_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A direct connection to api.test reaches 127.0.0.1 (asyncio's resolver calls socket.getaddrinfo)."""
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "api.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


def proxy_url(proxy: ForwardProxy) -> str:
    return f"http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{proxy.port}"


async def post(url: str) -> Any:
    http = HttpClient(connect_timeout_s=10, read_timeout_s=30)
    try:
        return [await http.post_json(url, {"q": i}, headers={"authorization": f"Bearer {API_KEY}"}) for i in range(2)]
    finally:
        await http.aclose()


async def failure(url: str) -> RequestFailed:
    with pytest.raises(RequestFailed) as caught:
        await post(url)
    return caught.value


@pytest.mark.parametrize("runner", RUNNERS)
def test_https_goes_through_a_connect_tunnel(cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                             runner: str) -> None:
    async def main() -> tuple[Any, JsonEndpoint, ForwardProxy]:
        async with JsonEndpoint(cert=cert) as endpoint, ForwardProxy({"api.test:443": endpoint.port}) as proxy:
            monkeypatch.setenv("HTTPS_PROXY", proxy_url(proxy))
            return await post("https://api.test/v1/chat/completions"), endpoint, proxy

    answers, endpoint, proxy = RUNNERS[runner](main())
    assert answers == [{"ok": True, "path": "/v1/chat/completions"}] * 2
    assert [head.split(b"\r\n")[0] for head in proxy.tunnels] == [b"CONNECT api.test:443 HTTP/1.1"]  # one, kept alive
    assert proxy.proxy_auth == [b"Basic " + base64.b64encode(f"{PROXY_USER}:{PROXY_PASSWORD}".encode())]
    # Inside the tunnel: the endpoint's own Host, our Authorization, and gzip asked for (and decoded: the answers).
    assert all(header(head, b"host") == b"api.test" for head in endpoint.heads) and len(endpoint.heads) == 2
    assert all(header(head, b"authorization") == f"Bearer {API_KEY}".encode() for head in endpoint.heads)
    assert all(header(head, b"accept-encoding") == b"gzip" for head in endpoint.heads)
    assert all(header(head, b"proxy-authorization") is None for head in endpoint.heads)  # the proxy's, not theirs


def test_http_goes_through_the_proxy_in_absolute_form(cert: tuple[Path, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> tuple[Any, ForwardProxy]:
        async with JsonEndpoint() as endpoint, ForwardProxy({"api.test:80": endpoint.port}) as proxy:
            monkeypatch.setenv("http_proxy", proxy_url(proxy))
            monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # the lower-case form wins
            return await post("http://api.test/v1/models"), proxy

    answers, proxy = asyncio.run(main())
    assert answers[0] == {"ok": True, "path": "/v1/models"}
    assert [head.split(b"\r\n")[0] for head in proxy.forwarded] == [b"POST http://api.test/v1/models HTTP/1.1"]
    assert proxy.proxy_auth == [b"Basic " + base64.b64encode(f"{PROXY_USER}:{PROXY_PASSWORD}".encode())]


@pytest.mark.parametrize("no_proxy", ["api.test", ".test", "*", "example.org, test", "api.test:443"])
@pytest.mark.usefixtures("api_test_resolves_to_loopback")
def test_no_proxy_sends_the_endpoint_direct(cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                            no_proxy: str) -> None:
    async def main() -> tuple[Any, JsonEndpoint, ForwardProxy]:
        async with JsonEndpoint(cert=cert) as endpoint, ForwardProxy({"api.test:443": endpoint.port}) as proxy:
            monkeypatch.setenv("HTTPS_PROXY", proxy_url(proxy))
            monkeypatch.setenv("NO_PROXY", no_proxy.replace("443", str(endpoint.port)))
            return await post(f"https://api.test:{endpoint.port}/v1/x"), endpoint, proxy

    answers, endpoint, proxy = asyncio.run(main())
    assert answers[0] == {"ok": True, "path": "/v1/x"} and len(endpoint.heads) == 2
    assert proxy.seen == 0


@pytest.mark.usefixtures("api_test_resolves_to_loopback")
def test_no_proxy_for_another_port_still_proxies(cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> ForwardProxy:
        async with JsonEndpoint(cert=cert) as endpoint, ForwardProxy({"api.test:443": endpoint.port}) as proxy:
            monkeypatch.setenv("HTTPS_PROXY", proxy_url(proxy))
            monkeypatch.setenv("no_proxy", "api.test:8443")
            await post("https://api.test/v1/x")
            return proxy

    assert len(asyncio.run(main()).tunnels) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_loopback_never_goes_through_a_proxy(cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                             host: str) -> None:
    async def main() -> tuple[Any, JsonEndpoint, JsonEndpoint, ForwardProxy]:
        async with JsonEndpoint() as plain, JsonEndpoint(cert=cert) as tls, ForwardProxy({}) as proxy:
            for name in PROXY_ENV[:2] + PROXY_ENV[3:5]:
                monkeypatch.setenv(name, proxy_url(proxy))
            answers = [*await post(f"http://{host}:{plain.port}/a"), *await post(f"https://{host}:{tls.port}/b")]
            return answers, plain, tls, proxy

    answers, plain, tls, proxy = asyncio.run(main())
    assert [answer["path"] for answer in answers] == ["/a", "/a", "/b", "/b"]
    assert proxy.seen == 0
    assert all(header(head, b"accept-encoding") is None for head in plain.heads + tls.heads)  # no compression asked


def test_a_gzip_answer_is_decoded(cert: tuple[Path, Path]) -> None:
    async def main() -> Any:
        async with JsonEndpoint(gzip_always=True) as endpoint:
            return await post(f"http://127.0.0.1:{endpoint.port}/gz")

    assert asyncio.run(main())[1] == {"ok": True, "path": "/gz"}


@pytest.mark.parametrize("encoding, body, says", [
    (b"gzip", b"\x1f\x8b\x08\x00 not really gzip", "does not decode"),
    (b"gzip", gzip.compress(b'{"ok": true}')[:-6], "ends partway through"),
    (b"br", b"\x0b\x02\x80{}\x03", "'br', which was not asked for"),
], ids=["corrupt", "truncated", "unasked_encoding"])
def test_an_answer_that_does_not_decode_is_an_invalid_response(cert: tuple[Path, Path], encoding: bytes,
                                                               body: bytes, says: str) -> None:
    async def main() -> RequestFailed:
        async with JsonEndpoint(encoding=(encoding, body)) as endpoint:
            return await failure(f"http://127.0.0.1:{endpoint.port}/gz")

    error = asyncio.run(main())
    assert error.failure_class == FailureClass.INVALID_RESPONSE and says in str(error)


def _no_secret_in(error: RequestFailed, caplog: pytest.LogCaptureFixture) -> None:
    shown = " ".join([str(error), repr(error), repr(error.args), repr(error.to_dict()), caplog.text])
    for secret in (API_KEY, PROXY_PASSWORD, PROXY_USER, base64.b64encode(f"{PROXY_USER}:{PROXY_PASSWORD}".encode())
                   .decode()):
        assert secret not in shown


@pytest.mark.parametrize("mode, failure_class, status, says", [
    ("refuse", FailureClass.HTTP_4XX, 407, "407 Proxy Authentication Required"),  # a wrong credential stays wrong
    ("close", FailureClass.CONNECT, None, "closed the connection"),
])
@pytest.mark.parametrize("scheme, variable", [("https", "HTTPS_PROXY"), ("http", "HTTP_PROXY")])
def test_a_failing_proxy_is_a_clear_failure_naming_proxy_and_endpoint(
        cert: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, scheme: str,
        variable: str, mode: Literal["refuse", "close"], failure_class: FailureClass, status: int | None,
        says: str) -> None:
    caplog.set_level(logging.DEBUG)

    async def main() -> tuple[RequestFailed, ForwardProxy]:
        async with ForwardProxy({}, mode=mode) as proxy:
            monkeypatch.setenv(variable, proxy_url(proxy))
            return await failure(f"{scheme}://api.test/v1/chat/completions"), proxy

    error, proxy = asyncio.run(main())
    assert proxy.seen == 1  # one attempt: the client retries nothing unless asked
    assert error.failure_class == failure_class and error.status == status
    message = str(error)
    assert f"proxy 127.0.0.1:{proxy.port} (from {variable})" in message and "api.test" in message and says in message
    _no_secret_in(error, caplog)


def test_an_unreachable_proxy_is_a_connect_failure_naming_it(cert: tuple[Path, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> tuple[RequestFailed, int]:
        async with ForwardProxy({}) as proxy:  # a port that was just let go: nothing listens there
            port = proxy.port
        monkeypatch.setenv("HTTPS_PROXY", f"http://{PROXY_USER}:{PROXY_PASSWORD}@127.0.0.1:{port}")
        return await failure("https://api.test/v1/x"), port

    error, port = asyncio.run(main())
    assert error.failure_class == FailureClass.CONNECT
    assert f"cannot connect to proxy 127.0.0.1:{port} (from HTTPS_PROXY) for api.test:443" in str(error)
    assert PROXY_PASSWORD not in str(error)

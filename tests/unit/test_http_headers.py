"""A header name or value holding CR, LF or NUL would end the request's head early or smuggle another header in:
the client refuses it before connecting, with an error that names the header and never shows its value."""

import asyncio

import pytest

from nemo_gym.errors import NemoGymError
from nemo_gym.http_client import HttpClient
from nemo_gym.http_wire import InvalidHeaderError
from tests.unit.test_http_wire import ScriptedServer, ok

SECRET = "sk-do-not-print-me"


@pytest.mark.parametrize("headers, named", [
    ({"authorization": f"Bearer {SECRET}\r\nx-admin: 1"}, "'authorization'"),
    ({"authorization": f"Bearer {SECRET}\n"}, "'authorization'"),
    ({"x-ng-session-id": f"{SECRET}\r"}, "'x-ng-session-id'"),
    ({"x-key": f"{SECRET}\0"}, "'x-key'"),
    ({"x-evil\r\nx-admin": "1"}, "'x-evil\\r\\nx-admin'"),
], ids=["crlf", "trailing_newline", "cr", "nul", "in_the_name"])
def test_a_header_that_breaks_framing_is_refused_before_sending(headers: dict[str, str], named: str) -> None:
    async def main() -> tuple[InvalidHeaderError, int]:
        async with ScriptedServer([ok()]) as server:
            http = HttpClient()
            try:
                with pytest.raises(InvalidHeaderError) as caught:
                    await http.post_json(server.url, {"a": 1}, headers=headers)
                return caught.value, server.connections
            finally:
                await http.aclose()

    error, connections = asyncio.run(main())
    assert named in str(error) and SECRET not in str(error) and SECRET not in repr(error.args)
    assert connections == 0  # refused before a connection was made
    assert isinstance(error, NemoGymError)  # the caller's input: a CLI exits 2, and no retry can fix it


def test_clean_headers_still_go_through() -> None:
    async def main() -> bytes:
        async with ScriptedServer([ok()]) as server:
            http = HttpClient()
            try:
                assert await http.post_json(server.url, {}, headers={"authorization": f"Bearer {SECRET}"}) == {
                    "ok": True}
                return server.requests[0]
            finally:
                await http.aclose()

    assert f"authorization: Bearer {SECRET}\r\n".encode() in asyncio.run(main())

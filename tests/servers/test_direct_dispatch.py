"""A server's exact paths go straight to their endpoints (server.base.direct_dispatch); everything else still gets
Starlette's answers: the lifespan, path parameters, 404 and 405."""

from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from nemo_gym.config.servers import ServerSpec
from nemo_gym.server.base import BaseServer, json_route


class Probe(BaseServer):
    def __init__(self) -> None:
        super().__init__(ServerSpec("probe", "resources_servers", "probe"))
        self.started = False
        self.seen: list[str] = []

    async def startup(self) -> None:
        self.started = True

    def routes(self) -> list[Route]:
        return [json_route("/echo", self.echo), Route("/item/{name}", self.item, methods=["GET"]),
                Route("/boom", self.boom, methods=["POST"])]

    async def echo(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        self.seen.append(request.headers.get("x-session", ""))
        return {"got": body}

    async def item(self, request: Request) -> Response:
        return PlainTextResponse(request.path_params["name"])

    async def boom(self, request: Request) -> Response:
        raise RuntimeError("a handler bug")


def test_direct_routes_answer_and_the_rest_is_starlettes() -> None:
    server = Probe()
    with TestClient(server.app(), raise_server_exceptions=False) as client:
        assert server.started  # the lifespan still runs through Starlette
        assert client.post("/echo", json={"a": 1}, headers={"x-session": "s1"}).json() == {"got": {"a": 1}}
        assert server.seen == ["s1"]
        assert client.post("/echo", content=b"{").json()["error"]["failure_class"] == "http_4xx"
        assert client.get("/health").json()["status"] == "ok"
        assert client.get("/item/abc").text == "abc"  # a path parameter: Starlette's router
        assert client.get("/nowhere").status_code == 404
        assert client.get("/echo").status_code == 405  # a direct path, another method: Starlette's 405
        assert client.post("/boom").status_code == 500

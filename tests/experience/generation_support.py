"""Helpers for the generation backend tests: token prompts, batches, and loopback servers of the test's own."""

import asyncio
import socket
import threading
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Iterator, Optional

import aiohttp
import orjson
import torch
from aiohttp import web

from nemo_gym.experience.batched_data_dict import BatchedDataDict

Handler = Callable[[str, dict[str, Any]], Awaitable[tuple[int, bytes]]]


def chat_prompt(tokenizer: Any, question: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def make_batch(prompts: list[list[int]], pad_token_id: int, stop_strings: Optional[list] = None,
               max_new_tokens: Optional[list[int]] = None) -> BatchedDataDict:
    """Right-padded input_ids with input_lengths, plus the optional per-sample columns."""
    input_ids = torch.full((len(prompts), max(map(len, prompts))), pad_token_id, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, :len(prompt)] = torch.tensor(prompt)
    data = BatchedDataDict(input_ids=input_ids, input_lengths=torch.tensor([len(p) for p in prompts]))
    if stop_strings is not None:
        data["stop_strings"] = stop_strings
    if max_new_tokens is not None:
        data["max_new_tokens"] = torch.tensor(max_new_tokens)
    return data


def generated_part(output: BatchedDataDict, data: BatchedDataDict, row: int) -> tuple[list[int], list[float]]:
    """The generated ids and their log-probs of one output row."""
    start, end = int(data["input_lengths"][row]), int(output["unpadded_sequence_lengths"][row])
    return output["output_ids"][row, start:end].tolist(), output["logprobs"][row, start:end].tolist()


class LoopbackServer:
    """An HTTP server on 127.0.0.1 in its own thread that records every request and answers through `handler`
    (path, JSON body) -> (status, body). `base_url` ends in /v1, like a vLLM server's."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: Optional[web.AppRunner] = None
        self.base_url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read() or b"{}")
        self.requests.append({"path": request.path, "query": dict(request.query), "headers": dict(request.headers),
                              "body": body})
        status, reply = await self.handler(request.path, body)
        return web.Response(status=status, body=reply, content_type="application/json")

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Requests still in flight when the test ends (a stub told to hang) are dropped after 1 s, not 60.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        return sock.getsockname()[1]

    def paths(self) -> list[str]:
        """The paths of the requests it got, in order."""
        return [r["path"] for r in self.requests]

    @property
    def root(self) -> str:
        """Its base URL without /v1, where vLLM serves its dev-mode routes."""
        return self.base_url.removesuffix("/v1")

    def __enter__(self) -> "LoopbackServer":
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


class FakeVllm:
    """A stub vLLM's dev endpoints: remembers the version label; `fail` maps a path to (status, body) to answer
    instead, `hang` is a path that never answers."""

    def __init__(self, fail: dict[str, tuple[int, Any]] | None = None, hang: str | None = None,
                 reported: str | None = None) -> None:
        self.label = "default"
        self.fail = fail or {}
        self.hang = hang
        self.reported = reported

    async def __call__(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        if path == self.hang:
            await asyncio.sleep(60)
        if path in self.fail:
            status, reply = self.fail[path]
            return status, orjson.dumps(reply)
        if path == "/update_weight_version":
            self.label = body["new_version"]
        if path == "/weight_info":
            return 200, orjson.dumps({"weight_version": self.reported or self.label})
        if path == "/reset_prefix_cache":
            return 200, orjson.dumps({"success": True})
        return 200, orjson.dumps({"status": "ok"})


class CountingProxy(LoopbackServer):
    """A LoopbackServer that forwards every request to a vLLM (`upstream_base_url`, .../v1) and returns its reply;
    `requests` counts what went through and `exchanges` pairs each forwarded body with vLLM's decoded answer.
    Paths keep their place: /v1/... goes to vLLM's /v1/..., and root paths (/tokenize) to its root."""

    def __init__(self, upstream_base_url: str) -> None:
        super().__init__(self._forward)
        self.upstream_root = upstream_base_url.rstrip("/").removesuffix("/v1")
        self._client: Optional[aiohttp.ClientSession] = None
        self.exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = []

    async def _forward(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        if self._client is None:  # created on the proxy's own loop
            self._client = aiohttp.ClientSession(trust_env=False)
        async with self._client.post(self.upstream_root + path, json=body) as response:
            status, content = response.status, await response.read()
        self.exchanges.append((body, orjson.loads(content)))
        return status, content

    def __exit__(self, *exc_info: Any) -> None:
        if self._client is not None:
            asyncio.run_coroutine_threadsafe(self._client.close(), self._loop).result(timeout=10)
        super().__exit__(*exc_info)


def closed_port_url() -> str:
    """A /v1 URL on a loopback port nothing listens on: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@contextmanager
def unresponsive_url() -> Iterator[str]:
    """A /v1 URL whose port accepts connections (the kernel's backlog) but never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"

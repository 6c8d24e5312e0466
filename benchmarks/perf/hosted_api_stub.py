"""A stub hosted API: an OpenAI-compatible Chat Completions endpoint that behaves as a rate-limited provider does.

- It checks the key (401) and the model name (404 `model_not_found`), and lists its one model at `GET /v1/models`.
- It enforces a request and a token budget per minute, each a leaky bucket (GCRA) that lets `burst_s` seconds of
  its budget through at once; beyond them it answers 429 with `retry-after` (whole seconds) and `retry-after-ms`.
  A refused request costs nothing. A request counts its prompt (4 characters per token of its messages' text) plus
  its `max_tokens` against the token budget when it arrives.
- Answers take a lognormal time (median `latency_median_s`, shape `latency_sigma`: a long tail), capped at 30 medians.
- `time_scale` shrinks time: a budget's minute lasts 60 * time_scale seconds and latencies are scaled alike, so a
  run's shape holds in less wall time (whoever reports figures says the scale).
- With `quota_requests` set, it answers that many requests and then refuses every one as a spent quota does: 429
  `insufficient_quota` with a `retry-after` of `quota_retry_after_s` (an hour).
- It plays the weather task of the other benchmarks (benchmarks/perf/stub_chat.py); `GET /stats` counts what came;
  `POST /control {"model": ..., "api_key": ..., "quota_requests": ...}` changes the served name or the key it wants,
  to make a running stack's name or key wrong, or gives a fresh quota (null: none), as when a spent one resets.
  `{"hold_tool_results": true}` holds every request that follows a tool result (a rollout's second turn) until
  `false` lets them go (`held` in the stats counts those waiting), so a test can stop a run between two turns.

Started by ng_run like any server (`entrypoint: benchmarks/perf/hosted_api_stub.py`), with these settings.
"""

import asyncio
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nemo_gym.config.servers import ServerSettings
from nemo_gym.server.base import HandlerError, error_response, json_response, json_route

# ng_run loads this file by path, in processes whose sys.path need not hold the checkout (its `benchmarks` package).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.perf.stub_chat import StubChatModel  # noqa: E402

_CHARS_PER_TOKEN = 4


class HostedApiSettings(ServerSettings):
    model: str = "stub-hosted"
    api_key: str = "sk-stub"
    requests_per_minute: int = Field(600, ge=1)
    tokens_per_minute: int = Field(100_000, ge=1)
    burst_s: float = Field(1.0, gt=0)  # OpenAI: a per-minute limit "may be enforced as" a per-second one
    latency_median_s: float = Field(1.0, gt=0)
    latency_sigma: float = Field(0.8, ge=0)
    time_scale: float = Field(1.0, gt=0)
    context_length: int = 8192
    seed: int = 0
    quota_requests: int | None = Field(None, ge=0)
    quota_retry_after_s: int = Field(3600, ge=1)


class _Bucket:
    """GCRA: `at` is when the bucket is empty again; a cost fits while `at` - now stays within the burst."""

    def __init__(self, per_minute: int, minute_s: float, burst_s: float) -> None:
        self.interval = minute_s / per_minute
        self.burst_s = burst_s
        self.at = 0.0

    def wait_for(self, cost: float, now: float) -> float:
        """0 when `cost` fits now (and is taken), else the seconds until it would."""
        start = max(self.at, now)
        if start + cost * self.interval - now > self.burst_s + self.interval:
            return start + cost * self.interval - now - self.burst_s - self.interval
        self.at = start + cost * self.interval
        return 0.0


class HostedApiStub(StubChatModel):
    Settings = HostedApiSettings

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert isinstance(self.settings, HostedApiSettings)
        self.stub = s = self.settings
        minute_s = 60.0 * s.time_scale
        burst_s = s.burst_s * s.time_scale
        self._requests = _Bucket(s.requests_per_minute, minute_s, burst_s)
        self._tokens = _Bucket(s.tokens_per_minute, minute_s, burst_s)
        self._random = random.Random(s.seed)
        self._model, self._key = s.model, s.api_key
        self._quota_left = s.quota_requests  # requests the quota still covers; None: no quota
        self.stats: dict[str, int] = {"requests": 0, "completed": 0, "rate_limited": 0, "unauthorized": 0,
                                      "model_not_found": 0, "models_listed": 0, "tokens_admitted": 0,
                                      "quota_refused": 0, "held": 0}
        self._released = asyncio.Event()
        self._released.set()

    def routes(self) -> list[Route]:
        return [
            Route("/v1/chat/completions", self._limited_chat, methods=["POST"]),
            json_route("/v1/models", self._listing, methods=("GET",)),
            json_route("/stats", self._stats, methods=("GET",)),
            json_route("/control", self._control),
        ]

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self._key}"

    async def _listing(self, body: Any, request: Request) -> Any:
        self.stats["models_listed"] += 1
        if not self._authorized(request):
            self.stats["unauthorized"] += 1
            raise HandlerError(401, "Incorrect API key provided.")
        return {"object": "list", "data": [{"id": self._model, "object": "model",
                                            "context_length": self.stub.context_length}]}

    async def _stats(self, body: Any, request: Request) -> dict[str, int]:
        return self.stats

    async def _control(self, body: dict[str, Any], request: Request) -> dict[str, str]:
        """Serve another model name or want another key from now on (a wrong name or key, without a restart)."""
        self._model = str(body.get("model", self._model))
        self._key = str(body.get("api_key", self._key))
        if "quota_requests" in body:
            self._quota_left = body["quota_requests"]
        if "hold_tool_results" in body:
            (self._released.clear if body["hold_tool_results"] else self._released.set)()
        return {"model": self._model}

    def _latency(self) -> float:
        s = self.stub
        median = s.latency_median_s * s.time_scale
        return min(30 * median, median * math.exp(self._random.gauss(0.0, s.latency_sigma)))

    async def _limited_chat(self, request: Request) -> Response:
        self.stats["requests"] += 1
        if not self._authorized(request):
            self.stats["unauthorized"] += 1
            return error_response(401, "invalid_api_key", "Incorrect API key provided.")
        body = orjson.loads(await request.body())
        if body.get("model") != self._model:
            self.stats["model_not_found"] += 1
            return error_response(404, "model_not_found", f"The model `{body.get('model')}` does not exist.")
        if self._quota_left is not None and self._quota_left <= 0:
            self.stats["quota_refused"] += 1
            return Response(orjson.dumps({"error": {
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}), status_code=429,
                media_type="application/json", headers={"retry-after": str(self.stub.quota_retry_after_s)})
        prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages") or []) // _CHARS_PER_TOKEN
        tokens = prompt + int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        now = time.monotonic()
        wait = self._requests.wait_for(1, now)
        if wait == 0.0:
            wait = self._tokens.wait_for(tokens, now)
            if wait:  # the request fitted, the tokens did not: give the request back
                self._requests.at -= self._requests.interval
        if wait:
            self.stats["rate_limited"] += 1
            return Response(orjson.dumps({"error": {"message": "Rate limit reached", "type": "requests",
                                                    "code": "rate_limit_exceeded"}}), status_code=429,
                            media_type="application/json",
                            headers={"retry-after": str(math.ceil(wait)), "retry-after-ms": str(round(wait * 1000))})
        self.stats["tokens_admitted"] += tokens
        if self._quota_left is not None:
            self._quota_left -= 1
        messages = body.get("messages") or [{}]
        if not self._released.is_set() and messages[-1].get("role") == "tool":
            self.stats["held"] += 1
            await self._released.wait()
            self.stats["held"] -= 1
        await asyncio.sleep(self._latency())
        completion = await self._chat(body, request)
        completion["usage"] = {"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10}
        self.stats["completed"] += 1
        return json_response(completion)

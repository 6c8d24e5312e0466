"""Simulated vLLM replicas behind HTTP, many in one process: what `vllm_model` talks to in the fleet tests and the
fleet benchmark.

Each replica answers what vllm_model and the collector's preflight use of vLLM's OpenAI server: `GET /v1/models`
(with `max_model_len`), `POST /v1/chat/completions` (usage with cached prompt tokens; `token_ids`, `prompt_token_ids`
and logprobs when asked), the token-exact continuation's `POST /tokenize` of chat messages and `POST /v1/completions`
of a token-id prompt (tokens.py is their tokenizer and chat template), and `GET /health`. A control endpoint lets a
test or benchmark read every replica's counters (`GET /fleet/stats`), kill one (`POST /fleet/kill {"replica": i}`),
start it again (`POST /fleet/revive`), and give one a fault (`POST /fleet/fault {"replica": i, "fault": kind}`).

Fault kinds, for the generation requests (`/v1/chat/completions`, `/v1/completions`); `GET /v1/models`, `/health`
and `/tokenize` still answer, as an API server in front of a broken engine does:
- `http_5xx`: 502 at once, as a gateway in front of a dead engine answers;
- `hang`: accepted, never answered (until the caller goes away);
- `slow`: every step `SLOW_FACTOR` times as long;
- `invalid_json`: 200 with the first half of the reply's JSON;
- `reset`: the head and half the body, then the connection closes;
- `quota`: `after` more requests answered, then 429 `insufficient_quota` with `retry-after: 3600`, as a hosted API
  whose quota is spent;
- `kill`: the replica dies (as `/fleet/kill`);
- `none`: no fault (a killed replica starts again). Requests the fault already took (hung ones) stay so.
A fault set mid-run takes the requests that arrive from then on, and those already generating when they finish.
"""

import asyncio
import itertools
import time
from typing import Any, Callable

import orjson

from benchmarks.fleet import chat, completions
from benchmarks.fleet.http_server import HttpEndpoint, Reply
from benchmarks.fleet.profile import ReplicaProfile
from benchmarks.fleet.generation import Generation
from benchmarks.fleet.replica import Completion, ReplicaDown, ReplicaSnapshot, Scheduler, SimReplica
from benchmarks.fleet.tokens import render
from benchmarks.fleet.workload import Workload

MAX_MODEL_LEN = 32768
FAULTS = ("none", "http_5xx", "hang", "slow", "invalid_json", "reset", "quota", "kill")
SLOW_FACTOR = 10.0
QUOTA_RETRY_AFTER_S = 3600
_GENERATION = ("/v1/chat/completions", "/v1/completions")
_QUOTA_SPENT = orjson.dumps({"error": {
    "message": "You exceeded your current quota, please check your plan and billing details.",
    "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}})
Body = Callable[[Completion], dict[str, Any]]  # the reply body of a finished generation


def _error(status: int, message: str) -> tuple[int, bytes]:
    return status, orjson.dumps({"error": {"message": message, "code": status}})


class ServedReplica:
    """One simulated replica on one port."""

    def __init__(self, profile: ReplicaProfile, scheduler: Scheduler, workload: Workload, model: str) -> None:
        self.profile = profile
        self.replica = SimReplica(profile, scheduler)
        self.workload = workload
        self.model = model
        self.endpoint = HttpEndpoint(self.handle)
        self._numbers = itertools.count()
        self._block = profile.block_tokens
        self.fault = "none"
        self.fault_at: float | None = None  # time.monotonic() when the fault was set
        self.quota_left = 0
        self.requests = 0  # generation requests received
        self.faulted = 0  # of them, answered (or held) by the fault
        self.arrivals: list[float] = []  # time.monotonic() of each generation request since the fault was set

    @property
    def base_url(self) -> str:
        return f"http://{self.endpoint.host}:{self.endpoint.port}/v1"

    async def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes] | Reply:
        if method == "GET" and path == "/v1/models":
            return 200, orjson.dumps({"object": "list", "data": [
                {"id": self.model, "object": "model", "owned_by": "sim", "max_model_len": MAX_MODEL_LEN}]})
        if method == "GET" and path == "/health":
            return 200, b"{}"
        if method == "POST" and path in _GENERATION:
            return await self._generation(path, body)
        if method == "POST" and path == "/tokenize":
            return self._tokenize(body)
        return _error(404, f"no route {method} {path}")

    def set_fault(self, fault: str, after: int = 0) -> None:
        """Answer generation requests with `fault` from now on (see the module docstring); `after`: the requests
        a `quota` fault still serves."""
        self.fault, self.fault_at, self.quota_left, self.arrivals = fault, time.monotonic(), after, []
        self.replica.retime(self.profile.slower(SLOW_FACTOR) if fault == "slow" else self.profile)

    def fault_dict(self) -> dict[str, Any]:
        return {"fault": self.fault, "fault_at": self.fault_at, "requests": self.requests, "faulted": self.faulted,
                "arrivals": self.arrivals}

    async def _generation(self, path: str, body: bytes) -> tuple[int, bytes] | Reply:
        self.requests += 1
        if self.fault != "none":
            self.arrivals.append(time.monotonic())
        if self.fault in ("http_5xx", "hang") or (self.fault == "quota" and self.quota_left <= 0):
            return await self._faulty(b"")
        if self.fault == "quota":
            self.quota_left -= 1
        status, payload = await (self._chat(body) if path == "/v1/chat/completions" else self._complete(body))
        if status != 200 or self.fault in ("none", "slow", "quota"):
            return status, payload
        return await self._faulty(payload)

    async def _faulty(self, payload: bytes) -> Reply:
        """The fault's answer in place of `payload` (the reply a healthy replica sends)."""
        self.faulted += 1
        if self.fault == "hang":
            await asyncio.get_running_loop().create_future()  # never set: cancelled when the connection goes
        if self.fault == "invalid_json":
            return Reply(200, payload[:len(payload) // 2])
        if self.fault == "reset":
            return Reply(200, payload, cut=True)
        if self.fault == "quota":
            return Reply(429, _QUOTA_SPENT, headers=(("retry-after", str(QUOTA_RETRY_AFTER_S)),))
        return Reply(*_error(502, "Bad Gateway"))

    async def _chat(self, raw: bytes) -> tuple[int, bytes]:
        def planned(body: dict[str, Any], number: int) -> tuple[Generation, Body]:
            generation, message = chat.sim_request(body, self.workload, f"call_{number}", self._block)
            return generation, lambda done: chat.completion_body(body, message, generation, done, self.model, number)

        return await self._generate(raw, "chat completion", planned)

    async def _complete(self, raw: bytes) -> tuple[int, bytes]:
        def planned(body: dict[str, Any], number: int) -> tuple[Generation, Body]:
            generation = completions.completion_request(body, self.workload, self._block)
            return generation, lambda done: completions.completion_body(generation, done, self.model, number)

        return await self._generate(raw, "completion", planned)

    async def _generate(self, raw: bytes, what: str,
                        planned: Callable[[dict[str, Any], int], tuple[Generation, Body]]) -> tuple[int, bytes]:
        """A generation request: `planned` turns its body into the generation and the reply to send when done."""
        number = next(self._numbers)
        try:
            body = orjson.loads(raw)
            generation, reply = planned(body, number)
        except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"bad {what} request: {exc}")
        if body.get("model") != self.model:
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        try:
            done = await self.replica.generate(generation.request)
        except ReplicaDown as exc:
            return _error(503, str(exc))
        return 200, orjson.dumps(reply(done))

    def _tokenize(self, raw: bytes) -> tuple[int, bytes]:
        try:
            body = orjson.loads(raw)
            ids = render(list(body["messages"]), bool(body.get("add_generation_prompt")))
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            return _error(400, f"bad tokenize request: {exc}")
        return 200, orjson.dumps({"tokens": ids, "count": len(ids), "max_model_len": MAX_MODEL_LEN})


class SimFleet:
    """Replicas of the given profiles (one each), sharing `scheduler`, each on its own loopback port."""

    def __init__(self, profiles: list[ReplicaProfile], scheduler: Scheduler, workload: Workload, model: str) -> None:
        self.scheduler = scheduler
        self.replicas = [ServedReplica(profile, scheduler, workload, model) for profile in profiles]
        self.control = HttpEndpoint(self._control)

    @property
    def base_urls(self) -> list[str]:
        return [replica.base_url for replica in self.replicas]

    @property
    def control_url(self) -> str:
        return f"http://{self.control.host}:{self.control.port}"

    async def start(self) -> None:
        for replica in self.replicas:
            await replica.endpoint.start()
        await self.control.start()

    def stop(self) -> None:
        for replica in self.replicas:
            replica.endpoint.kill()
            replica.replica.kill()
        self.control.kill()

    def kill(self, index: int) -> None:
        """Replica `index` dies: connections reset, requests lost, the port closed."""
        self.replicas[index].endpoint.kill()
        self.replicas[index].replica.kill()

    async def revive(self, index: int) -> None:
        """Replica `index` starts again on its port, empty."""
        served = self.replicas[index]
        served.replica.revive()
        if not served.endpoint.listening:
            await served.endpoint.start()

    async def set_fault(self, index: int, fault: str, after: int = 0) -> None:
        """Replica `index` answers with `fault` from now on (any earlier fault cleared, a killed replica revived)."""
        await self.revive(index)
        self.replicas[index].set_fault(fault, after)
        if fault == "kill":
            self.kill(index)

    def snapshots(self) -> list[ReplicaSnapshot]:
        return [served.replica.snapshot() for served in self.replicas]

    async def _control(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if method == "GET" and path == "/fleet/stats":
            return 200, orjson.dumps({"replicas": [{**snapshot_dict(s), **served.fault_dict()}
                                                   for s, served in zip(self.snapshots(), self.replicas)],
                                      "base_urls": self.base_urls})
        if method == "POST" and path == "/fleet/fault":
            try:
                request = orjson.loads(body)
                index, fault, after = int(request["replica"]), request["fault"], int(request.get("after", 0))
                self.replicas[index]
                if fault not in FAULTS:
                    raise ValueError(fault)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
                return _error(400, f"{path} takes {{\"replica\": <index below {len(self.replicas)}>, \"fault\": "
                                   f"<one of {', '.join(FAULTS)}>, \"after\": <requests, for quota>}}")
            await self.set_fault(index, fault, after)
            return 200, orjson.dumps({"replica": index, **self.replicas[index].fault_dict()})
        if method == "POST" and path in ("/fleet/kill", "/fleet/revive"):
            try:
                index = int(orjson.loads(body)["replica"])
                self.replicas[index]
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
                return _error(400, f"{path} takes {{\"replica\": <index below {len(self.replicas)}>}}")
            if path == "/fleet/kill":
                self.kill(index)
            else:
                await self.revive(index)
            return 200, orjson.dumps({"replica": index, "alive": self.replicas[index].replica.alive})
        return _error(404, f"no route {method} {path}")


def snapshot_dict(snapshot: ReplicaSnapshot) -> dict[str, Any]:
    return {**{key: value for key, value in vars(snapshot).items() if key != "stats"}, **vars(snapshot.stats)}

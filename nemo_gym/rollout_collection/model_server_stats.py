"""What the run's model servers count as it goes, for the progress line and file: the 429s their endpoints answer,
and the state of each vLLM replica (requests, failures by class, ejections).

A model server waits out the 429s it can (responses_api_models/endpoint_calls.py), and a row's call records report
them only once its rollout has succeeded: counted from the rows alone, the progress line said "0 429s" while every
call waited, and never counted the 429s of a call that failed. So each of our model servers counts every 429 its
endpoint answers as it comes, all its workers together (in the limiter's shared memory), and answers
`GET /rate_limited` with the count; the collector reads each model server's count when the run starts, then every
`POLL_S` seconds and once at the end, and adds up how much each grew. vllm_model answers `GET /replicas` with its
router's view of each replica (routing.py), and `GET /engine_load` with each replica's load as its vLLM reports it
(vllm_model/engine_load.py), read at the same times and kept as last read; `listeners` are called after each read
(the automatic concurrency level follows vLLM's queue: engine_level.py). The model servers need not know the
collector (nothing is pushed to it), and it costs three small GETs per model server every few seconds.

A model server that answers a GET with a 4xx (someone else's, or one without replicas: it has no such route) is not
asked it again; while none counts 429s, the count is the rows' (`RunCounters.rate_limited`). A model server shared
with another run counts that run's 429s and requests too, and one that restarted counts afresh from zero.
"""

import asyncio
from typing import Any, Callable

from nemo_gym.failures import RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.responses_api_models.stats_paths import ENGINE_LOAD_PATH, RATE_LIMITED_PATH, REPLICAS_PATH
from nemo_gym.rollout_collection.engine_level import FleetLoad
from nemo_gym.rollout_collection.preflight import MODELS_KIND
from nemo_gym.server.client import ServerClient

POLL_S = 2.0
_TIMEOUT_S = 5.0


class ModelServerStats:
    """The 429s counted by the model servers at `urls` (name -> URL) since the first `poll`, and their replicas."""

    def __init__(self, http: HttpClient, urls: dict[str, str]) -> None:
        self._http = http
        self._servers = frozenset(urls)
        self._counting = dict(urls)  # the servers that count 429s
        self._routing = dict(urls)  # the servers that route over replicas
        self._loading = dict(urls)  # the servers that read their replicas' load
        self._last: dict[str, int] = {}  # each model server's count when last read
        self._grown = 0
        self.replicas: dict[str, list[dict[str, Any]]] = {}  # per server, each replica's state when last read
        self.engine: dict[str, list[dict[str, Any]]] = {}  # per server, each replica's load when last read
        self.listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def of_run(cls, servers: ServerClient) -> "ModelServerStats":
        """The counts of every model server the head server lists, read once."""
        listing = await servers.servers()
        stats = cls(servers.http, {name: entry["url"] for name, entry in listing.items()
                                   if entry.get("kind") == MODELS_KIND})
        await stats.poll()
        return stats

    @property
    def count(self) -> int | None:
        """429s counted since the first read; None while no model server counts them."""
        return self._grown if self._last else None

    async def poll(self) -> None:
        """Read every model server's count and replicas; one that did not answer this time keeps its last."""
        counting, routing, loading = list(self._counting), list(self._routing), list(self._loading)
        answers = await asyncio.gather(*(self._read(self._counting, name, RATE_LIMITED_PATH) for name in counting),
                                       *(self._read(self._routing, name, REPLICAS_PATH) for name in routing),
                                       *(self._read(self._loading, name, ENGINE_LOAD_PATH) for name in loading))
        for name, answer in zip(counting, answers[:len(counting)]):
            value = answer.get("rate_limited") if isinstance(answer, dict) else None
            if type(value) is not int or value < 0:
                continue
            last = self._last.get(name)
            if last is not None:  # a count lower than the last: the server restarted and counts from zero
                self._grown += value - last if value >= last else value
            self._last[name] = value
        for name, answer in zip(routing, answers[len(counting):len(counting) + len(routing)]):
            replicas = answer.get("replicas") if isinstance(answer, dict) else None
            if isinstance(replicas, list) and replicas:
                self.replicas[name] = replicas
        for name, answer in zip(loading, answers[len(counting) + len(routing):]):
            loads = answer.get("replicas") if isinstance(answer, dict) else None
            if isinstance(loads, list) and loads:
                self.engine[name] = loads
            else:
                self.engine.pop(name, None)
        for listener in self.listeners:
            listener()

    async def _read(self, servers: dict[str, str], name: str, path: str) -> Any:
        try:
            return await self._http.get_json(f"{servers[name]}{path}", timeout_s=_TIMEOUT_S)
        except RequestFailed as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                del servers[name]  # it has no such route
            return None

    def fleet_load(self) -> FleetLoad | None:
        """Every model server's vLLM replicas together, as last read; None unless each of the run's model servers
        reported its replicas' load."""
        return FleetLoad.of(self.engine) if self._servers and set(self.engine) == self._servers else None

    def troubled_replicas(self) -> list[str]:
        """One line per replica that failed a request or was taken out, for the run's last lines."""
        lines = []
        for server, replicas in sorted(self.replicas.items()):
            for replica in replicas:
                failures = replica.get("failures") or {}
                if failures or replica.get("ejections") or replica.get("downs"):
                    classes = ", ".join(f"{name} {count}" for name, count in sorted(failures.items()))
                    lines.append(f"{server} replica {replica.get('endpoint')}: {replica.get('requests')} requests, "
                                 f"{sum(failures.values())} failed ({classes or 'none'}), ejected "
                                 f"{replica.get('ejections', 0)}x, down {replica.get('downs', 0)}x, now "
                                 f"{replica.get('state')}")
        return lines

    async def _polling(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            await self.poll()

    def start(self) -> None:
        if self._counting or self._routing or self._loading:
            self._task = asyncio.create_task(self._polling())

    def stop(self) -> None:
        """Stop polling (a last `poll` then gives the count the run ends with)."""
        if self._task is not None:
            self._task.cancel()

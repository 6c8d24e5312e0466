"""The 429s the run's model endpoints answer, counted as they come, for the progress line and file.

A model server waits out the 429s it can (responses_api_models/endpoint_calls.py), and a row's call records report
them only once its rollout has succeeded: counted from the rows alone, the progress line said "0 429s" while every
call waited, and never counted the 429s of a call that failed. So each of our model servers counts every 429 its
endpoint answers as it comes, all its workers together (in the limiter's shared memory), and answers
`GET /rate_limited` with the count; the collector reads each model server's count when the run starts, then every
`POLL_S` seconds and once at the end, and adds up how much each grew. The model servers need not know the collector
(nothing is pushed to it), and it costs one small GET per model server every few seconds.

A model server that answers the GET with a 4xx (someone else's: it has no such route) is not asked again; while none
counts, the count is the rows' (`RunCounters.rate_limited`). A model server shared with another run counts that
run's 429s too, and one that restarted counts afresh from zero.
"""

import asyncio

from nemo_gym.failures import RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.responses_api_models.endpoint_calls import RATE_LIMITED_PATH
from nemo_gym.rollout_collection.preflight import MODELS_KIND
from nemo_gym.server.client import ServerClient

POLL_S = 2.0
_TIMEOUT_S = 5.0


class Endpoint429s:
    """The 429s counted by the model servers at `urls` (name -> URL) since the first `poll`."""

    def __init__(self, http: HttpClient, urls: dict[str, str]) -> None:
        self._http = http
        self._urls = dict(urls)
        self._last: dict[str, int] = {}  # each model server's count when last read
        self._grown = 0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def of_run(cls, servers: ServerClient) -> "Endpoint429s":
        """The counts of every model server the head server lists, read once."""
        listing = await servers.servers()
        counts = cls(servers.http, {name: entry["url"] for name, entry in listing.items()
                                    if entry.get("kind") == MODELS_KIND})
        await counts.poll()
        return counts

    @property
    def count(self) -> int | None:
        """429s counted since the first read; None while no model server counts them."""
        return self._grown if self._last else None

    async def poll(self) -> None:
        """Read every model server's count; one that did not answer this time keeps its last."""
        names = list(self._urls)
        for name, value in zip(names, await asyncio.gather(*(self._read(name) for name in names))):
            if value is None:
                continue
            last = self._last.get(name)
            if last is not None:  # a count lower than the last: the server restarted and counts from zero
                self._grown += value - last if value >= last else value
            self._last[name] = value

    async def _read(self, name: str) -> int | None:
        try:
            answer = await self._http.get_json(f"{self._urls[name]}{RATE_LIMITED_PATH}", timeout_s=_TIMEOUT_S)
        except RequestFailed as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                del self._urls[name]  # not one of ours
            return None
        value = answer.get("rate_limited") if isinstance(answer, dict) else None
        return value if type(value) is int and value >= 0 else None

    async def _polling(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            await self.poll()

    def start(self) -> None:
        if self._urls:
            self._task = asyncio.create_task(self._polling())

    def stop(self) -> None:
        """Stop polling (a last `poll` then gives the count the run ends with)."""
        if self._task is not None:
            self._task.cancel()

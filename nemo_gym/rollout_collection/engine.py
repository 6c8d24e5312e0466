"""The rollout engine: what every rollout of one caller shares, so that a caller runs all its rows through one.

One HTTP client (no retries of its own: `run_rollout` counts the attempts, see docs/architecture.md, "Retry
budget"), one head-server lookup per agent, the rollout policy, and one concurrency limit shared by every stream that
brings none of its own. `RolloutCollectionHelper` keeps one per head server for its whole life, across prompt groups
and `run_examples` calls; ng_collect_rollouts runs its rows through one too.

An engine that opened its own HTTP client closes it whenever no stream uses it, so that a stream that ended leaves
nothing connected; the next stream opens it again and keeps the agents' URLs it already looked up.
"""

import asyncio
from typing import Any

from nemo_gym.http_client import HttpClient
from nemo_gym.rollout_collection.retry_budget import RetryBudget
from nemo_gym.rollout_collection.rollout import RolloutFailure, RolloutPolicy, RolloutSuccess, run_rollout
from nemo_gym.server.client import ServerClient


class RolloutEngine:
    """Runs rows through their agents' `/run` under one policy, one HTTP client and one lookup of each agent."""

    def __init__(self, servers: ServerClient, policy: RolloutPolicy, shared_concurrency: int | None = None, *,
                 owns_http: bool = False) -> None:
        self.servers = servers
        self.policy = policy
        self._shared_concurrency = shared_concurrency
        self._owns_http = owns_http
        self._run_urls: dict[str, str] = {}
        self._users = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lookup: asyncio.Lock | None = None
        self._shared: asyncio.Semaphore | None = None
        self.run_budget: RetryBudget | None = None  # the run-wide retry budget, where the caller keeps one (the CLI)

    @classmethod
    def connect(cls, head_url: str, policy: RolloutPolicy, shared_concurrency: int | None) -> "RolloutEngine":
        """An engine with an HTTP client of its own (closed while no stream uses it)."""
        http = HttpClient(read_timeout_s=policy.rollout_timeout_s)
        return cls(ServerClient(head_url, http), policy, shared_concurrency, owns_http=True)

    def bind(self) -> None:
        """Make ready for a stream on the running loop (locks and semaphores belong to one loop, and a helper may
        serve one asyncio.run after another); refused while streams of another loop run."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._users:
                raise RuntimeError("a RolloutCollectionHelper runs its rollouts on one event loop at a time")
            self._loop, self._lookup = loop, asyncio.Lock()
            self._shared = asyncio.Semaphore(self._shared_concurrency) if self._shared_concurrency else None

    def enter(self) -> None:
        """A stream starts using the engine (after `bind` on the same loop)."""
        self._users += 1

    async def leave(self) -> None:
        """A stream is done with the engine; the last one out closes an HTTP client the engine opened."""
        self._users -= 1
        if self._users == 0 and self._owns_http:
            await self.servers.http.aclose()

    @property
    def shared_limit(self) -> asyncio.Semaphore | None:
        """The concurrency limit of every stream without its own (after `bind`)."""
        return self._shared

    async def run(self, agent: str, row: dict[str, Any], attempts: int | None = None) -> RolloutSuccess | RolloutFailure:
        """One rollout of `row` on `agent` (`run_rollout`'s attempts, deadline and failure class)."""
        url = self._run_urls.get(agent) or await self._look_up(agent)
        return await run_rollout(self.servers.http, url, row, self.policy, attempts, self.run_budget)

    async def url_of(self, agent: str) -> str:
        """Where a row of `agent` is posted: the agent's /run."""
        return f"{await self.servers.url(agent)}/run"

    async def _look_up(self, agent: str) -> str:
        async with self._lookup:  # type: ignore[union-attr]  # one lookup, not one per concurrent row
            if agent not in self._run_urls:
                self._run_urls[agent] = await self.url_of(agent)
        return self._run_urls[agent]

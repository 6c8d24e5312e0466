"""Shared bits of the Python API tests: rows for the fault agents, their /stats, and what the event loop holds."""

import asyncio
from typing import Any, Iterator

import httpx
import psutil

from tests.collection.conftest import CollectionStack


def rows(agent: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    """`n` keyed rows for `agent`; the fault agent answers reward (task + rollout) % 2."""
    return list(iter_rows(agent, n, start))


def iter_rows(agent: str, n: int, start: int = 0) -> Iterator[dict[str, Any]]:
    for task in range(start, start + n):
        yield {"responses_create_params": {"input": f"q{task}"}, "agent_ref": {"name": agent},
               "_ng_task_index": task, "_ng_rollout_index": 0, "q": task}


def stats(stack: CollectionStack, agent: str, reset: bool = False) -> dict[str, int]:
    """The agent's /run counts: runs, in_flight, max_in_flight (since the last reset)."""
    return httpx.post(f"{stack.stack.url(agent)}/stats", json={"reset": reset}, trust_env=False).json()


def other_tasks() -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


def connections_to(url: str) -> int:
    """Open TCP connections from this process to the server at `url`."""
    port = int(url.rsplit(":", 1)[1])
    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)

"""One engine per helper: the prompt groups a trainer runs through one RolloutCollectionHelper at once share its
concurrency limit and its lookup of each agent on the head server, and leave nothing connected once all are done."""

import asyncio
from typing import Any

import pytest

from nemo_gym.rollout_collection import RolloutCollectionHelper
from nemo_gym.sync_bridge import run_sync
from nemo_gym.server.client import ServerClient
from tests.collection.conftest import CollectionStack
from tests.collection.helper_util import connections_to, rows, stats


def test_concurrent_streams_share_one_limit_and_one_lookup(collection_stack: CollectionStack,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[str] = []
    url_of = ServerClient.url

    async def counted(self: ServerClient, name: str) -> str:
        lookups.append(name)
        return await url_of(self, name)

    monkeypatch.setattr(ServerClient, "url", counted)
    stats(collection_stack, "slow_agent", reset=True)
    helper = RolloutCollectionHelper(collection_stack.stack.head_url, num_samples_in_parallel=4)

    async def group(start: int) -> list[Any]:
        return [row["q"] async for row, _ in helper.run_examples(rows("slow_agent", 12, start=start))]

    async def main() -> list[list[Any]]:
        return await asyncio.gather(*(group(start) for start in (0, 100, 200)))

    groups = run_sync(main())
    assert [sorted(g) for g in groups] == [list(range(s, s + 12)) for s in (0, 100, 200)]
    assert stats(collection_stack, "slow_agent")["max_in_flight"] <= 4  # three streams of one helper, one limit
    assert lookups == ["slow_agent"]
    assert connections_to(collection_stack.stack.url("slow_agent")) == 0  # the last stream out closed the client

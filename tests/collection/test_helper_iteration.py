"""RolloutCollectionHelper.run_examples: both iteration styles, every row once, the concurrency bound, lazy rows."""

import asyncio
from types import SimpleNamespace
from typing import Iterator

import pytest

from nemo_gym.rollout_collection import RolloutCollectionHelper
from nemo_gym.sync_bridge import run_sync
from tests.collection.conftest import CollectionStack
from tests.collection.helper_util import iter_rows, rows, stats


def _check(results: list[tuple[dict, dict]], sent: list[dict]) -> None:
    assert sorted(r["_ng_task_index"] for r, _ in results) == [r["_ng_task_index"] for r in sent]
    for row, result in results:
        task = row["_ng_task_index"]
        assert list(result)[:2] == ["_ng_task_index", "_ng_rollout_index"]
        assert (result["_ng_task_index"], result["_ng_rollout_index"]) == (task, 0)
        assert result["agent_ref"] == row["agent_ref"] and result["q"] == task
        assert result["reward"] == float(task % 2) and result["response"]["output"][0]["type"] == "message"


def test_async_for_yields_every_row_once(collection_stack: CollectionStack) -> None:
    sent = rows("agent_a", 60)
    helper = RolloutCollectionHelper(collection_stack.stack.head_url)

    async def collect() -> list[tuple[dict, dict]]:
        return [item async for item in helper.run_examples(sent, num_samples_in_parallel=8)]

    _check(run_sync(collect()), sent)


def test_futures_style_of_nemo_gym_yields_every_row_once(collection_stack: CollectionStack) -> None:
    sent = rows("agent_b", 40)
    port = int(collection_stack.head_port)
    # NeMo Gym passes its BaseServerConfig (an object with .host/.port); a mapping works the same way.
    for head in (SimpleNamespace(host="127.0.0.1", port=port), {"host": "127.0.0.1", "port": port}):

        async def collect() -> list[tuple[dict, dict]]:
            out = []
            for future in RolloutCollectionHelper().run_examples(examples=sent, head_server_config=head):
                row, result = await future
                out.append((row, result))
            return out

        _check(asyncio.run(collect()), sent)


def test_futures_style_needs_a_sized_sequence(collection_stack: CollectionStack) -> None:
    stream = RolloutCollectionHelper(collection_stack.stack.head_url).run_examples(iter_rows("agent_a", 3))
    with pytest.raises(TypeError, match="needs a sized sequence.*got a generator.*async for row, result"):
        iter(stream)


def test_concurrency_is_bounded_by_the_argument_and_by_a_semaphore(collection_stack: CollectionStack) -> None:
    helper = RolloutCollectionHelper(collection_stack.stack.head_url)

    async def collect(bound: int, use_semaphore: bool) -> int:
        limit = {"semaphore": asyncio.Semaphore(bound)} if use_semaphore else {"num_samples_in_parallel": bound}
        return len([item async for item in helper.run_examples(rows("slow_agent", 48), **limit)])

    for bound, use_semaphore in ((6, False), (4, True)):
        stats(collection_stack, "slow_agent", reset=True)
        assert run_sync(collect(bound, use_semaphore)) == 48
        seen = stats(collection_stack, "slow_agent")
        assert seen["runs"] == 48
        assert seen["max_in_flight"] == bound, seen  # reached, never exceeded (48 rows at 30 ms each)


def test_a_20k_row_generator_is_pulled_only_as_results_are_taken(collection_stack: CollectionStack) -> None:
    concurrency = 16
    pulled = 0

    def generate() -> Iterator[dict]:
        nonlocal pulled
        for row in iter_rows("agent_a", 20_000):
            pulled += 1
            yield row

    async def consume() -> tuple[int, int]:
        taken, most_ahead = 0, 0
        helper = RolloutCollectionHelper(collection_stack.stack.head_url)
        async with helper.run_examples(generate(), num_samples_in_parallel=concurrency) as results:
            async for _ in results:
                taken += 1
                most_ahead = max(most_ahead, pulled - taken)
                if taken == 2_000:
                    break
        return taken, most_ahead

    taken, most_ahead = run_sync(consume())
    # Rows pulled but not yet handed over never exceed the concurrency: the permit travels with the result.
    assert taken == 2_000 and most_ahead <= concurrency, most_ahead
    assert pulled <= taken + concurrency

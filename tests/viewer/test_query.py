"""Filters, sorting and paging over the index, and two runs compared task by task. The scan block is shrunk so
that every query crosses block boundaries."""

from pathlib import Path

import pytest

from nemo_gym.viewer import compare, query
from nemo_gym.viewer.compare import compare_runs
from nemo_gym.viewer.errors import ViewerError
from nemo_gym.viewer.index import open_run
from nemo_gym.viewer.query import RowFilter, select
from tests.viewer.synthetic import expected_reward, write_run

TASKS, REPEATS = 20, 3


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(query, "SCAN_ROWS", 7)
    monkeypatch.setattr(compare, "SCAN_ROWS", 4)
    files = write_run(tmp_path / "run.jsonl", TASKS, REPEATS, shards=2, failed={(4, 1): "timeout", (9, 2): "connect"},
                      agents=("agent_a", "agent_b"))
    return open_run(",".join(map(str, files)), "a", tmp_path / "cache")


def _keys(index, positions: list[int]) -> list[tuple[int, int]]:
    return [(index.rows.value("task", p), index.rows.value("rollout", p)) for p in positions]


def _all(index, filt: RowFilter, sort: str = "key", descending: bool = False, limit: int = 500):
    return select(index, filt, sort, descending, 0, limit)


def test_column_filters(run) -> None:
    zero = _all(run, RowFilter(reward_max=0))
    expected = [(t, r) for t in range(TASKS) for r in range(REPEATS)
                if (t, r) not in {(4, 1), (9, 2)} and expected_reward(t, r) == 0]
    assert _keys(run, zero.positions) == expected and zero.total == len(expected) and zero.exact
    assert _keys(run, _all(run, RowFilter(task=7)).positions) == [(7, 0), (7, 1), (7, 2)]
    agent_b = _keys(run, _all(run, RowFilter(agent="agent_b")).positions)
    assert agent_b and all(t % 2 == 1 for t, _ in agent_b)
    assert _keys(run, _all(run, RowFilter(failure="any")).positions) == [(4, 1), (9, 2)]
    assert _keys(run, _all(run, RowFilter(failure="connect")).positions) == [(9, 2)]
    assert _all(run, RowFilter(failure="none")).total == TASKS * REPEATS - 2
    assert _all(run, RowFilter(failure="no_such_class")).total == 0
    assert _all(run, RowFilter(agent="nobody")).total == 0
    both = _all(run, RowFilter(reward_min=1, agent="agent_a", task=0))
    assert _keys(run, both.positions) == [(0, 0)]


def test_sorting_keeps_unknown_values_last_and_ties_in_key_order(run) -> None:
    best = _all(run, RowFilter(), "reward", descending=True)
    rewards = [run.rows.value("reward", p) for p in best.positions]
    assert rewards[:-2] == sorted(rewards[:-2], reverse=True) and _keys(run, best.positions)[-2:] == [(4, 1), (9, 2)]
    ones = _keys(run, best.positions[:best.positions.index(best.positions[0]) + 5])
    assert ones == sorted(ones)  # equal rewards stay in key order
    tokens = _all(run, RowFilter(), "tokens")
    values = [run.rows.value("output_tokens", p) for p in tokens.positions]
    assert values[:-2] == sorted(values[:-2]) and values[-2:] == [-1, -1]


@pytest.mark.parametrize("sort,descending", [("key", False), ("reward", True), ("length", False), ("tokens", True)])
def test_pages_put_together_are_the_whole_ordering(run, sort: str, descending: bool) -> None:
    whole = _all(run, RowFilter(reward_min=0), sort, descending).positions
    pages = []
    for offset in range(0, len(whole), 8):
        page = select(run, RowFilter(reward_min=0), sort, descending, offset, 8)
        assert page.total == len(whole)
        pages += page.positions
    assert pages == whole


def test_text_search_reads_prompt_and_answer_and_stops_when_the_page_is_full(run) -> None:
    hits = _all(run, RowFilter(text="task 13)"))
    assert _keys(run, hits.positions) == [(13, 0), (13, 1), (13, 2)] and hits.exact
    assert _keys(run, _all(run, RowFilter(text='ANSWER 5-2: IT IS "SUNNY"')).positions) == [(5, 2)]
    assert _all(run, RowFilter(text="get_weather")).total == 0  # tool names are neither prompt nor answer
    assert _keys(run, _all(run, RowFilter(text="boom timeout")).positions) == [(4, 1)]  # a failure's error
    early = select(run, RowFilter(text="weather in"), "key", False, 0, 5)
    assert len(early.positions) == 5 and not early.exact and early.scanned == 5 and early.notes
    ranked = select(run, RowFilter(text="city1"), "reward", True, 0, 3)  # City1, City10..City19
    assert ranked.exact and ranked.total == 11 * REPEATS and ranked.scanned == TASKS * REPEATS
    assert [run.rows.value("reward", p) for p in ranked.positions] == [1.0, 1.0, 1.0]


def test_bad_query_parameters_are_refused(run) -> None:
    with pytest.raises(ViewerError, match="sort must be one of"):
        select(run, RowFilter(), "size")
    with pytest.raises(ViewerError, match="limit within"):
        select(run, RowFilter(), "key", False, 0, 100000)


def test_compare_lists_the_tasks_whose_mean_reward_changed(tmp_path: Path, run) -> None:
    other_files = write_run(tmp_path / "other.jsonl", TASKS + 2, REPEATS, seed=5, failed={(3, 0): "timeout"})
    other = open_run(str(other_files[0]), "b", tmp_path / "cache")
    # Same rewards except where the failures differ: task 3 (one rollout less in B), 4 and 9 (one more in B).
    result = compare_runs(run, other)
    expected = []
    for task in range(TASKS):
        mean_a = [expected_reward(task, r) for r in range(REPEATS) if (task, r) not in {(4, 1), (9, 2)}]
        mean_b = [expected_reward(task, r) for r in range(REPEATS) if (task, r) != (3, 0)]
        if abs(sum(mean_a) / len(mean_a) - sum(mean_b) / len(mean_b)) > 1e-9:
            expected.append(task)
    assert [t.task for t in result.changed] == expected and result.total_changed == len(expected)
    assert result.common == TASKS and result.only_a == 0 and result.only_b == 2
    worse = compare_runs(run, other, "worse")
    assert all(t.delta < 0 for t in worse.changed) and worse.total_changed == result.worse
    by_delta = compare_runs(run, other, "all", "delta")
    deltas = [t.delta for t in by_delta.changed]
    assert deltas == sorted(deltas)
    paged = [t.task for offset in range(0, len(expected), 1) for t in compare_runs(run, other, "all", "task",
                                                                                   offset, 1).changed]
    assert paged == expected

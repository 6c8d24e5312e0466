"""pass@k, majority@k, the bootstrap interval and the per-agent/per-task statistics, against brute force."""

import collections
import itertools
import math
import random
import statistics
import time

import numpy as np
import pytest

from nemo_gym.metrics import (
    AgentAccumulator, bootstrap_ci, compact_row, iter_groups, k_ladder, majority_at_k, pass_at_k, pass_at_ks,
)


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_at_k_matches_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            got = pass_at_k(np.array([n]), np.array([c]), k)[0]
            assert got == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_is_undefined_below_k_and_stable_for_large_n() -> None:
    assert math.isnan(pass_at_k(np.array([2]), np.array([1]), 4)[0])
    assert pass_at_k(np.array([1000]), np.array([1]), 500)[0] == pytest.approx(0.5)


def test_k_ladder() -> None:
    assert k_ladder(1) == [1] and k_ladder(4) == [1, 2, 4] and k_ladder(6) == [1, 2, 4, 6]


def _columns(rows: list[dict]) -> AgentAccumulator:
    columns = AgentAccumulator()
    for row in sorted(rows, key=lambda r: (r["_ng_task_index"], r["_ng_rollout_index"])):
        columns.add(row)
    return columns


def test_unequal_rollouts_per_task_use_each_tasks_own_n() -> None:
    # Task 0: 4 rollouts (1 correct), task 1: 2 rollouts (2 correct), task 2: 1 rollout (0 correct; failures ate 3).
    rewards = {0: [1, 0, 0, 0], 1: [1, 1], 2: [0]}
    rows = [{"_ng_task_index": t, "_ng_rollout_index": i, "reward": float(r)}
            for t, rs in rewards.items() for i, r in enumerate(rs)]
    metrics = _columns(rows).finish().agent_metrics
    assert metrics["pass@1"] == pytest.approx((1 / 4 + 1 + 0) / 3)
    assert metrics["pass@2"] == pytest.approx((_brute_pass_at_k(4, 1, 2) + 1) / 2)  # task 2 cannot estimate k=2
    assert metrics["pass@2/num_tasks"] == 2 and metrics["pass@4/num_tasks"] == 1
    assert metrics["pass@4"] == pytest.approx(1.0)
    assert metrics["pass@1[avg-of-4]"] == pytest.approx((1 / 4 + 1 + 0) / 3)
    assert metrics["mean/reward"] == pytest.approx(3 / 7)  # per rollout, unlike the per-task averages above


def test_agent_and_task_statistics_match_brute_force() -> None:
    rng = np.random.default_rng(3)
    rows = [{"_ng_task_index": t, "_ng_rollout_index": r, "reward": float(rng.integers(0, 2)),
             "tokens": int(rng.integers(1, 100)), "flag": bool(rng.integers(0, 2)), "text": "x" * 300,
             "nested": {"a": 1}} for t in range(7) for r in range(5)]
    del rows[3]["tokens"]  # a field missing from one row is missing, not zero
    result = _columns(rows).finish()
    tokens = [r["tokens"] for r in rows if "tokens" in r]
    m = result.agent_metrics
    assert m["median/tokens"] == statistics.median(tokens) and m["mean/tokens"] == pytest.approx(np.mean(tokens))
    assert m["std/tokens"] == pytest.approx(np.std(tokens, ddof=1)) and m["max/flag"] in (0.0, 1.0)
    assert not any("text" in k or "nested" in k for k in m)
    groups = list(iter_groups(result.groups_path))
    assert [g["_ng_task_index"] for g in groups] == list(range(7))
    for group in groups:
        values = [r["tokens"] for r in rows if r["_ng_task_index"] == group["_ng_task_index"] and "tokens" in r]
        assert group["median/tokens"] == statistics.median(values)
        assert (group["min/tokens"], group["max/tokens"]) == (min(values), max(values))
        assert group["std/tokens"] == pytest.approx(np.std(values, ddof=1))
        assert group["num_rollouts"] == 5


def test_compact_row_keeps_scalars_only() -> None:
    compact = compact_row({"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 1.0, "label": "a",
                           "extracted_answer": None, "response": {"output": []}, "long": "y" * 1000,
                           "_ng_attempts": 2})
    assert compact == {"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 1.0, "label": "a",
                       "extracted_answer": None}


def _majority_vote(answers: list[int], rewards: list[float]) -> float:
    """The definition, one task at a time: the most frequent answer (-1 abstains), ties to the one seen first."""
    votes = collections.Counter(a for a in answers if a >= 0)
    if not votes:
        return 0.0
    winner = next(a for a in answers if a >= 0 and votes[a] == max(votes.values()))
    scores = [r for a, r in zip(answers, rewards) if a == winner]
    return sum(scores) / len(scores)


def _majority(tasks: list[list[tuple[int, float]]], k: int) -> tuple[float, int]:
    groups, positions, answers, rewards = [], [], [], []
    for task, rollouts in enumerate(tasks):
        for position, (answer, reward) in enumerate(rollouts):
            groups.append(task), positions.append(position), answers.append(answer), rewards.append(reward)
    sizes = np.array([len(t) for t in tasks])
    return majority_at_k(np.array(groups), np.array(positions), np.array(answers, dtype=np.int64),
                         np.array(rewards), sizes, k)


def test_majority_at_k_matches_the_definition_task_by_task() -> None:
    assert _majority([[(3, 1.0), (3, 1.0), (5, 0.0)]], 3) == (1.0, 1)
    assert _majority([[(5, 0.0), (3, 1.0), (3, 1.0), (5, 0.0)]], 4) == (0.0, 1)  # tie: the answer seen first wins
    assert _majority([[(-1, 0.0), (-1, 0.0)]], 2) == (0.0, 1)
    rng = random.Random(0)
    for _ in range(200):
        tasks = [[(rng.randint(-1, 3), float(rng.random() < 0.5)) for _ in range(rng.randint(1, 8))]
                 for _ in range(rng.randint(1, 6))]
        for k in (1, 2, 3, 4, 8):
            used = [t for t in tasks if len(t) >= k]
            expected = sum(_majority_vote([a for a, _ in t[:k]], [r for _, r in t[:k]]) for t in used)
            score, n_used = _majority(tasks, k)
            assert n_used == len(used)
            if used:
                assert score == pytest.approx(expected / len(used))


def test_majority_at_k() -> None:
    rows = [{"_ng_task_index": 0, "_ng_rollout_index": i, "reward": float(a == "7"), "extracted_answer": a}
            for i, a in enumerate(["7", "8", "8", "7"])]
    rows += [{"_ng_task_index": 1, "_ng_rollout_index": i, "reward": float(a == "2"), "extracted_answer": a}
             for i, a in enumerate(["2", "2", None, "3"])]
    metrics = _columns(rows).finish().agent_metrics
    assert metrics["majority@2"] == pytest.approx((1.0 + 1.0) / 2)  # first 2: ["7","8"] tie -> "7"; ["2","2"]
    assert metrics["majority@4"] == pytest.approx((1.0 + 1.0) / 2)  # ["7","8","8","7"] tie -> "7"


def test_bootstrap_is_reproducible_and_covers_the_mean() -> None:
    rng = np.random.default_rng(0)
    counts = np.full(500, 4)
    sums = rng.binomial(4, 0.3, size=500).astype(float)
    first, second = bootstrap_ci(sums, counts), bootstrap_ci(sums, counts)
    assert first == second and first != bootstrap_ci(sums, counts, seed=1)
    mean = sums.sum() / counts.sum()
    assert first[0] < mean < first[1] and first[1] - first[0] < 0.1
    # Continuous rewards take the resampling path; its interval is just as reproducible.
    floats = rng.random(5000) * 4
    assert bootstrap_ci(floats, np.full(5000, 4)) == bootstrap_ci(floats, np.full(5000, 4))


def test_small_blocks_give_the_same_metrics_as_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    # Per-task statistics, pass@k and majority@k are computed a block of whole tasks at a time; a run spanning
    # many blocks must match one that fits in a single block.
    rng = random.Random(7)
    rows = []
    for task in range(60):
        for rollout in range(rng.choice([1, 3, 4, 6, 8])):
            row = {"_ng_task_index": task, "_ng_rollout_index": rollout, "reward": float(rng.random() < 0.4),
                   "extracted_answer": rng.choice([None, "1", "2", "3"]), "tokens": rng.randint(1, 50)}
            if task > 40:
                row["late_field"] = rng.random()  # a field that appears only in later blocks
            if rng.random() < 0.05:
                row["tokens"] = math.inf  # non-finite values are skipped, not counted
            rows.append(row)
    single = _columns(rows).finish()
    monkeypatch.setattr("nemo_gym.metrics.accumulator._BLOCK_ROWS", 7)
    blocked = _columns(rows).finish()
    assert blocked.agent_metrics.keys() == single.agent_metrics.keys()
    for key, value in single.agent_metrics.items():
        assert blocked.agent_metrics[key] == pytest.approx(value, rel=1e-12), key
    assert list(iter_groups(blocked.groups_path)) == list(iter_groups(single.groups_path))
    assert blocked.reward_histogram == single.reward_histogram
    late = [r["late_field"] for r in rows if "late_field" in r]
    assert blocked.agent_metrics["median/late_field"] == statistics.median(late)
    assert "majority@8" in blocked.agent_metrics and "majority@6" not in blocked.agent_metrics


@pytest.mark.parametrize("continuous", [False, True])
def test_the_interval_from_counted_outcomes_equals_the_bootstrap_over_tasks(continuous: bool,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # 0/1 rewards are counted per (sum, n) category; rewards with more categories than CATEGORY_LIMIT are read back
    # per task from disk. Either way the interval is the one `bootstrap_ci` gives over the per-task arrays.
    monkeypatch.setattr("nemo_gym.metrics.accumulator._BLOCK_ROWS", 500)
    monkeypatch.setattr("nemo_gym.metrics.accumulator.CATEGORY_LIMIT", 50)
    rng = random.Random(5)
    rows = [{"_ng_task_index": t, "_ng_rollout_index": r,
             "reward": rng.random() if continuous else float(rng.random() < 0.3)}
            for t in range(1500) for r in range(rng.choice([2, 3, 4]))]
    metrics = _columns(rows).finish().agent_metrics
    sums, counts = collections.defaultdict(float), collections.Counter()
    for row in rows:
        sums[row["_ng_task_index"]] += row["reward"]
        counts[row["_ng_task_index"]] += 1
    tasks = sorted(sums)
    expected = bootstrap_ci(np.array([sums[t] for t in tasks]), np.array([counts[t] for t in tasks], dtype=float))
    assert (metrics["ci95_low/reward"], metrics["ci95_high/reward"]) == pytest.approx(expected, rel=1e-12)


def test_usage_counts_are_fields_of_the_rollout_and_replace_the_rows_own() -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 0, "reward": 1.0, "output_tokens": 999,
             "response": {"usage": {"output_tokens": 10 + t, "input_tokens": 5}}} for t in range(3)]
    rows.append({"_ng_task_index": 3, "_ng_rollout_index": 0, "reward": 0.0,
                 "response": {"usage": {"output_tokens": 20, "input_tokens": 5}}})  # no field of its own
    m = _columns(rows).finish().agent_metrics
    assert m["max/output_tokens"] == 20 and m["min/output_tokens"] == 10  # the usage count, never the row's 999
    assert m["mean/input_tokens"] == 5


def test_pass_at_ks_gives_each_k_bit_for_bit_as_one_call_per_k() -> None:
    rng = np.random.default_rng(5)
    n = rng.integers(1, 300, size=40)
    c = rng.integers(0, n + 1)
    ks = [1, 2, 3, 8, 64, 299]
    ladder = dict(pass_at_ks(n, c, ks))
    assert list(ladder) == ks
    for k in ks:
        np.testing.assert_array_equal(ladder[k], pass_at_k(n, c, k))  # NaN where n < k, on both sides


def test_every_k_of_a_large_task_costs_one_running_product() -> None:
    # 1,667 rollouts per task: NeMo Gym's family names every k up to n, which took 16 s at one product per k.
    rows = [{"_ng_task_index": t, "_ng_rollout_index": r, "reward": float((t + r) % 3 == 0)}
            for t in range(6) for r in range(1667)]
    started = time.process_time()
    metrics = _columns(rows).finish().agent_metrics
    assert time.process_time() - started < 5.0
    assert "pass@1667" in metrics and metrics["pass@1"] == pytest.approx(sum(r["reward"] for r in rows) / len(rows))

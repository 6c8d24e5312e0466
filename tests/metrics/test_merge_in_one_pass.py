"""ng_aggregate_rollouts merges and aggregates in one pass (`aggregate_rollouts(..., merge_into=)`): its merged
file, failures sidecar, metrics file, report and the rows sent to the environment are byte for byte those of the
two passes it replaces (`merge_shards`, then `aggregate_rollouts` over the merged file)."""

import asyncio
import random
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from nemo_gym.errors import InputDataError
from nemo_gym.http_client import HttpClient
from nemo_gym.rollout_collection import AggregateResult, aggregate_rollouts, merge_shards
from nemo_gym.run_files.paths import report_path
from nemo_gym.server.client import ServerClient
from tests.compat.threaded import json_app, serving


def _row(task: int, rollout: int, agent: str, rng: random.Random) -> dict[str, Any]:
    answer = str(rng.randint(0, 2))
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agent},
            "reward": float(answer == "0"), "extracted_answer": answer, "num_output_tokens": rng.randint(1, 99),
            "response": {"output": [{"text": f"t{task}r{rollout}"}], "usage": {"output_tokens": rng.randint(1, 9)}}}


def _failure(task: int, rollout: int, agent: str, failure_class: str) -> dict[str, Any]:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agent},
            "failure_class": failure_class, "attempts": 3}


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def _shards(tmp: Path) -> list[Path]:
    """Four shards in completion order whose keys interleave, two agents, a few keys never done, a re-run shard
    (identical copies), and failures sidecars whose records are out of key order, some later done elsewhere."""
    rng = random.Random(3)
    rows = [_row(t, r, "b" if t % 5 == 0 else "a", rng) for t in range(60) for r in range(4) if (t, r) != (7, 2)]
    rows = [row for row in rows if row["_ng_task_index"] not in (11, 12) or row["_ng_rollout_index"] < 2]
    rng.shuffle(rows)
    shards = [_write(tmp / f"shard{i}.jsonl", rows[i::4]) for i in range(4)]
    shards.append(_write(tmp / "shard4.jsonl", rows[:40]))  # a requeued shard that wrote some rows again
    # Failure classes come first-recorded timeout, server_error, context_length; in key order another way round.
    _write(tmp / "shard0_failures.jsonl", [_failure(12, 3, "a", "timeout"), _failure(7, 2, "a", "server_error"),
                                          _failure(30, 1, "a", "timeout"), _failure(11, 2, "a", "timeout")])
    _write(tmp / "shard3_failures.jsonl", [_failure(11, 3, "a", "context_length"), _failure(12, 2, "a", "timeout"),
                                          _failure(11, 2, "a", "context_length"), _failure(5, 0, "b", "timeout")])
    return shards


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    """An environment that asks for the rows, then answers with what it saw of them."""
    if "rows" not in body:
        return {"needs_rows": True}
    tasks = sorted({row["_ng_task_index"] for row in body["rows"]})
    return {"agent_metrics": {"rows_seen": len(body["rows"])},
            "group_level_metrics": [{"_ng_task_index": task, "seen": True} for task in tasks]}


def _aggregate(head_url: str, files: list[Path], metrics: Path, merge_into: Path | None = None) -> AggregateResult:
    async def run() -> AggregateResult:
        http = HttpClient()
        try:
            return await aggregate_rollouts(files, metrics, ServerClient(head_url, http), merge_into=merge_into)
        finally:
            await http.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize("run_rows", [None, 50])  # the key index sorted in memory, or in runs on disk
def test_one_pass_writes_what_merging_then_aggregating_wrote(tmp_path: Path, run_rows: int | None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if run_rows is not None:
        monkeypatch.setattr("nemo_gym.run_files.key_order._RUN_ROWS", run_rows)
        monkeypatch.setattr("nemo_gym.run_files.key_order._MERGE_BLOCK", 7)
    shards = _shards(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    merged, metrics = out / "merged.jsonl", out / "merged_aggregate_metrics.json"
    outputs = [merged, out / "merged_failures.jsonl", metrics, report_path(metrics)]
    posted: list[Any] = []
    with serving(json_app({"/aggregate_metrics": _answer}, posted)) as agent_url, \
            serving(json_app({"/servers": {"servers": [{"name": name, "url": agent_url} for name in "ab"]}})) as url:
        stats = merge_shards(shards, merged)
        two_passes = _aggregate(url, [merged], metrics)
        before, bodies = [path.read_bytes() for path in outputs], posted[:]
        shutil.rmtree(out)
        out.mkdir()
        posted.clear()
        one_pass = _aggregate(url, shards, metrics, merge_into=merged)
    assert (stats.rows, stats.duplicates, stats.failures) == (235, 40, 5)
    assert [path.read_bytes() for path in outputs] == before
    assert posted == bodies and len(bodies) == 4  # per agent: the library's metrics, then the rows it asked for
    assert one_pass.merged == stats
    assert (one_pass.rows, one_pass.duplicates, one_pass.summaries) == (two_passes.rows, 0, two_passes.summaries)
    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in outputs)  # no work files


def test_a_pass_that_fails_leaves_no_merged_file(tmp_path: Path) -> None:
    rng = random.Random(0)
    good = _write(tmp_path / "a.jsonl", [_row(0, 0, "a", rng)])
    bad = _write(tmp_path / "b.jsonl", [{"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 1.0}])  # no agent
    with pytest.raises(InputDataError, match="no agent_ref.name"):
        _aggregate("http://127.0.0.1:9", [good, bad], tmp_path / "m_aggregate_metrics.json",
                   merge_into=tmp_path / "m.jsonl")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl"]

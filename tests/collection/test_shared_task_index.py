"""Rows that carry the same `_ng_task_index` must be the same row: identical rows are one task sampled again (as in
NeMo Gym), differing ones are refused before anything runs, naming both lines."""

import io
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import InputDataError
from nemo_gym.rollout_collection import task_groups
from nemo_gym.rollout_collection.config import RolloutCollectionConfig
from nemo_gym.rollout_collection.inputs import materialize_inputs

AGENTS = {"a"}


def _row(text: str, **extra: object) -> dict:
    return {"responses_create_params": {"input": text}, "expected_answer": text, **extra}


def _materialize(tmp_path: Path, lines: list[bytes], **values: object) -> list[tuple[int, int]]:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(line + b"\n" for line in lines))
    config = RolloutCollectionConfig.from_mapping({"input_jsonl_fpath": str(source), "agent_name": "a",
                                                   "output_jsonl_fpath": str(tmp_path / "out.jsonl"), **values})
    out = io.BytesIO()
    materialize_inputs(config, source, "a", AGENTS, None, out)
    rows = [orjson.loads(line) for line in out.getvalue().splitlines()]
    return [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows]


def test_differing_rows_that_share_an_index_are_refused_naming_both_lines(tmp_path: Path) -> None:
    lines = [orjson.dumps(_row("p", _ng_task_index=5)), orjson.dumps(_row("q")),
             orjson.dumps(_row("r", _ng_task_index=5))]
    with pytest.raises(InputDataError) as refused:
        _materialize(tmp_path, lines)
    source = tmp_path / "in.jsonl"
    assert str(refused.value).startswith(f"{source}:3: _ng_task_index 5 is also carried by {source}:1, a different "
                                         f"row; rows that share a _ng_task_index must be identical")


def test_identical_rows_share_an_index_whatever_their_spacing_key_order_and_bookkeeping(tmp_path: Path) -> None:
    first = orjson.dumps(_row("p", _ng_task_index=5))
    # The same row as other JSON text: other key order and spacing, its own rollout index and repeat count.
    same = b'{"expected_answer": "p", "_ng_task_index": 5, "_ng_rollout_index": 9, "_ng_num_repeats": 2, ' \
           b'"responses_create_params": {"input": "p"}}'
    assert _materialize(tmp_path, [first, same]) == [(5, 0), (5, 1), (5, 2)]


def test_a_row_with_an_index_still_joins_the_automatic_task_of_that_number(tmp_path: Path) -> None:
    # NeMo Gym's rule, kept: automatic and carried indices are one namespace; only rows that both carry an index
    # are compared.
    lines = [orjson.dumps(_row("p")), orjson.dumps(_row("c", _ng_task_index=0))]
    assert _materialize(tmp_path, lines) == [(0, 0), (0, 1)]


def test_the_first_row_is_found_after_the_index_moved_to_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.setattr(task_groups, "MEMORY_ENTRIES", 4)  # spill after 4 entries, as 65,536 would on a big file
    lines = [orjson.dumps(_row(f"t{i}", _ng_task_index=i)) for i in range(20)]
    assert len(_materialize(tmp_path, [*lines, lines[1]])) == 21  # an identical repeat of a spilled row is fine
    with pytest.raises(InputDataError, match=r"in.jsonl:21: _ng_task_index 1 is also carried by .*in.jsonl:2, a "):
        _materialize(tmp_path, [*lines, orjson.dumps(_row("other", _ng_task_index=1))])

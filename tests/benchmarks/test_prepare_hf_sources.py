"""ng_prepare_benchmark reads the formats Hugging Face hands out, offline: a parquet file, a folder of parquet files
(a dataset repository's snapshot) and a folder `datasets`' save_to_disk wrote (Arrow stream files listed in its
state.json, one subfolder per split for a DatasetDict). The test writes each with pyarrow (the `hf` extra)."""

import json
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import ConfigError, InputDataError
from tests.benchmarks.util import REPO_BENCHMARKS, prepare_cli
from tests.collection.util import read_rows
from tests.helpers.requirements import require_module

pa = require_module("pyarrow")
import pyarrow.ipc  # noqa: E402
import pyarrow.parquet  # noqa: E402

SAMPLE = REPO_BENCHMARKS / "gsm8k" / "sample_source.jsonl"


def _table() -> "pa.Table":
    records = [orjson.loads(line) for line in SAMPLE.read_bytes().splitlines() if line.strip()]
    return pa.Table.from_pylist(records)


def _save_to_disk(folder: Path, table: "pa.Table") -> Path:
    """The layout of datasets' Dataset.save_to_disk: Arrow stream shards named in state.json."""
    folder.mkdir(parents=True)
    half = table.num_rows // 2
    names = []
    for index, part in enumerate((table.slice(0, half), table.slice(half))):
        names.append(f"data-{index:05d}-of-00002.arrow")
        with pa.OSFile(str(folder / names[-1]), "wb") as sink, pa.ipc.new_stream(sink, part.schema) as writer:
            writer.write_table(part)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names],
                                                   "_split": "test"}))
    (folder / "dataset_info.json").write_text("{}")
    return folder


def _prepared(source: Path, out: Path, capsys: pytest.CaptureFixture) -> list[dict]:
    prepare_cli(["+benchmark=gsm8k", f"+source={source}", f"+output_dir={out}"], capsys)
    return read_rows(out / "gsm8k.jsonl")


def test_parquet_file_and_dataset_folders_give_the_jsonl_rows(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    expected = _prepared(SAMPLE, tmp_path / "from_jsonl", capsys)
    assert [r["expected_answer"] for r in expected] == ["27", "1234", "150", "16"]

    parquet = tmp_path / "test-00000-of-00001.parquet"
    pa.parquet.write_table(_table(), parquet)
    assert _prepared(parquet, tmp_path / "from_parquet", capsys) == expected

    snapshot = tmp_path / "snapshot" / "main"
    snapshot.mkdir(parents=True)
    pa.parquet.write_table(_table().slice(0, 2), snapshot / "test-00000-of-00002.parquet")
    pa.parquet.write_table(_table().slice(2), snapshot / "test-00001-of-00002.parquet")
    assert _prepared(tmp_path / "snapshot", tmp_path / "from_snapshot", capsys) == expected

    saved = _save_to_disk(tmp_path / "saved", _table())
    assert _prepared(saved, tmp_path / "from_saved", capsys) == expected

    dataset_dict = tmp_path / "dict"
    _save_to_disk(dataset_dict / "test", _table())
    (dataset_dict / "dataset_dict.json").write_text(json.dumps({"splits": ["test"]}))
    assert _prepared(dataset_dict, tmp_path / "from_dict", capsys) == expected


def test_bad_records_and_ambiguous_folders_are_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    table = _table().set_column(1, "answer", pa.array(["#### 27", "#### 1,234", "no mark", "#### 16"]))
    parquet = tmp_path / "bad.parquet"
    pa.parquet.write_table(table, parquet)
    with pytest.raises(InputDataError, match=r"bad\.parquet:3: field 'answer' has no final '####"):
        _prepared(parquet, tmp_path / "out", capsys)

    two_splits = tmp_path / "two"
    for split in ("train", "test"):
        _save_to_disk(two_splits / split, _table())
    (two_splits / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    with pytest.raises(ConfigError, match="holds the splits train, test; name one"):
        _prepared(two_splits, tmp_path / "out2", capsys)

    not_arrow = tmp_path / "junk.parquet"
    not_arrow.write_text("not parquet")
    with pytest.raises(InputDataError, match="junk.parquet: not a readable parquet or Arrow file"):
        _prepared(not_arrow, tmp_path / "out3", capsys)

"""Benchmark sources in Hugging Face's formats, read locally with pyarrow (the `hf` extra): a parquet file, a folder
of parquet files (a dataset repository's snapshot), or a folder `datasets`' `save_to_disk` wrote (Arrow stream
files listed in its state.json; a saved DatasetDict holds one such folder per split). Nothing is downloaded.

Records are numbered from 1 in file order, so an error names `file:N` as it does for JSONL.
"""

import json
from pathlib import Path
from typing import Any, Iterator

from nemo_gym.errors import ConfigError, InputDataError

PARQUET_SUFFIX = ".parquet"
STATE_FILE = "state.json"  # one split saved by datasets' save_to_disk
DATASET_DICT_FILE = "dataset_dict.json"  # several splits saved by save_to_disk, one subfolder each


def is_tabular(path: Path) -> bool:
    return path.is_dir() or path.suffix == PARQUET_SUFFIX


def _pyarrow() -> Any:
    try:
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise ConfigError("reading parquet files and Hugging Face dataset folders needs pyarrow: "
                          "pip install 'nemo_gym[hf]'") from None
    return pyarrow


def _saved_split_files(folder: Path) -> list[Path]:
    state = json.loads((folder / STATE_FILE).read_text())
    return [folder / entry["filename"] for entry in state["_data_files"]]


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if (path / DATASET_DICT_FILE).is_file():
        splits = json.loads((path / DATASET_DICT_FILE).read_text())["splits"]
        if len(splits) != 1:
            raise ConfigError(f"+source={path} holds the splits {', '.join(splits)}; name one, e.g. "
                              f"+source={path / splits[0]}")
        path = path / splits[0]
    if (path / STATE_FILE).is_file():
        return _saved_split_files(path)
    parquet = sorted(path.rglob(f"*{PARQUET_SUFFIX}"))
    if not parquet:
        raise ConfigError(f"+source={path} is a folder with neither a datasets save_to_disk layout ({STATE_FILE}) "
                          f"nor parquet files")
    return parquet


def _batches(pa: Any, file: Path) -> Iterator[Any]:
    if file.suffix == PARQUET_SUFFIX:
        yield from pa.parquet.ParquetFile(file).iter_batches()
    else:
        with pa.memory_map(str(file)) as source:
            yield from pa.ipc.open_stream(source)


def iter_table_records(path: Path, shown_as: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """('source:N', record) for every row of a parquet file or a Hugging Face dataset folder."""
    pa = _pyarrow()
    number = 0
    for file in _files(path):
        try:
            for batch in _batches(pa, file):
                for record in batch.to_pylist():
                    number += 1
                    yield f"{shown_as}:{number}", record
        except (pa.ArrowException, OSError) as exc:
            raise InputDataError(f"{file}: not a readable parquet or Arrow file ({exc})") from None

"""What the benchmarks' prepare.py files share: reading a public dataset file the user downloaded, and writing rows.

Sources are JSONL (one JSON object a line), the format the public copies of these datasets come in, or what Hugging
Face hands out: a parquet file or a local `datasets` folder (tabular.py). Errors name the file, the line (the
record's number) and the field, so a bad record is found without opening the file.
"""

import os
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson

from nemo_gym.benchmark_layout.discover import shown
from nemo_gym.benchmark_layout.tabular import is_tabular, iter_table_records
from nemo_gym.errors import ConfigError, InputDataError
from nemo_gym.jsonl_records import iter_records


def require_source(source: Path | None, benchmark: str, where_to_get: str) -> Path:
    """The source (file or dataset folder) given with +source, which must exist; `where_to_get` tells a user
    without one what to do."""
    if source is None:
        raise ConfigError(f"benchmark '{benchmark}' needs +source=<file>: {where_to_get}")
    if not source.exists():
        raise ConfigError(f"+source={source}: file not found")
    return source


def read_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """('file:line', record) for every record of a JSONL file, a parquet file or a Hugging Face dataset folder."""
    if is_tabular(path):
        return iter_table_records(path, shown(path))
    return iter_records(path, shown(path))


def text_field(where: str, record: dict[str, Any], name: str) -> str:
    """The record's `name` field (or its capitalised spelling, which some public copies use) as non-empty text."""
    value = record.get(name, record.get(name.capitalize()))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise InputDataError(f"{where}: field '{name}' must be non-empty text, got {value!r}")
    return value.strip()


def write_rows(rows: Iterable[dict[str, Any]], path: Path) -> Path:
    """Write `rows` as JSONL, atomically: a source that fails halfway leaves no partial file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            for row in rows:
                out.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path

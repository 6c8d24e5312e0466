"""Reading a JSONL file of objects, where every error names the file and line."""

from pathlib import Path
from typing import Any, Iterator

import orjson

from nemo_gym.errors import InputDataError
from nemo_gym.run_files.rows import iter_lines


def iter_records(path: Path, shown_as: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """('file:line', record) for every non-blank line; `shown_as` is how the file is named in errors."""
    name = shown_as or str(path)
    for line_no, _, line in iter_lines(path):
        where = f"{name}:{line_no}"
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputDataError(f"{where}: malformed JSON ({exc})") from None
        if not isinstance(record, dict):
            raise InputDataError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
        yield where, record

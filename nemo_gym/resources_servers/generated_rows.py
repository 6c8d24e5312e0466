"""Where the environments' seeded data generators write their rows: a JSONL file, or standard output."""

import sys
from pathlib import Path
from typing import Any, Iterable, Optional

import orjson


def write_rows(rows: Iterable[dict[str, Any]], out: Optional[Path]) -> None:
    data = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    if out is None:
        sys.stdout.buffer.write(data)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)

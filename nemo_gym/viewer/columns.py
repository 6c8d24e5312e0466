"""A column store on disk: one flat binary file per column, appended in blocks, read back a slice at a time.

Scans read a bounded slice (`read`), binary searches map the file (`mapped`, which touches only the pages the
search visits), so neither the build nor a query ever holds a whole column of a million-row run.
"""

from pathlib import Path
from typing import Iterator

import numpy as np

# column name -> numpy dtype
ROW_COLUMNS = {
    "task": "<i8", "rollout": "<i8", "file": "<i4", "offset": "<i8",
    "length": "<i8", "reward": "<f8", "input_tokens": "<i8", "output_tokens": "<i8",
    "agent": "<i4", "failure": "<i4", "tool_calls": "<i4", "cost_usd": "<f8",
}
TASK_COLUMNS = {
    "task": "<i8", "first": "<i8", "count": "<i8", "mean_reward": "<f8",
    "failed": "<i8",
}
FLUSH_ROWS = 1 << 14  # rows per block written while building: a few MB of pending tuples
SCAN_ROWS = 1 << 16  # rows per block read by a scan: a few MB of numpy arrays


class ColumnWriter:
    """Appends rows (tuples in schema order) and writes each column's part out every `FLUSH_ROWS` rows."""

    def __init__(self, directory: Path, prefix: str, schema: dict[str, str]) -> None:
        self._files = {name: open(directory / f"{prefix}{name}.bin", "wb") for name in schema}
        self._dtype = np.dtype(list(schema.items()))
        self._pending: list[tuple] = []
        self.rows = 0

    def append(self, values: tuple) -> None:
        self._pending.append(values)
        self.rows += 1
        if len(self._pending) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        block = np.array(self._pending, dtype=self._dtype)  # one C-level conversion per block, not per value
        for name, file in self._files.items():
            np.ascontiguousarray(block[name]).tofile(file)
        self._pending = []

    def close(self) -> None:
        self.flush()
        for file in self._files.values():
            file.close()


class ColumnStore:
    """Read side of the columns `ColumnWriter` wrote under `directory` with `prefix`."""

    def __init__(self, directory: Path, prefix: str, schema: dict[str, str], rows: int) -> None:
        self._paths = {name: directory / f"{prefix}{name}.bin" for name in schema}
        self._dtypes = {name: np.dtype(dtype) for name, dtype in schema.items()}
        self.rows = rows

    def read(self, name: str, start: int, count: int) -> np.ndarray:
        """`count` values of column `name` from row `start` (fewer at the end)."""
        count = max(0, min(count, self.rows - start))
        dtype = self._dtypes[name]
        if not count:
            return np.empty(0, dtype)
        return np.fromfile(self._paths[name], dtype, count, offset=start * dtype.itemsize)

    def value(self, name: str, row: int) -> int | float:
        return self.read(name, row, 1)[0].item()

    def mapped(self, name: str) -> np.ndarray:
        """The whole column mapped read-only, for binary searches."""
        if not self.rows:
            return np.empty(0, self._dtypes[name])
        return np.memmap(self._paths[name], self._dtypes[name], mode="r", shape=(self.rows,))

    def chunks(self, names: tuple[str, ...],
               chunk_rows: int = SCAN_ROWS) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """(start, {name: values}) over all rows, `chunk_rows` at a time."""
        for start in range(0, self.rows, chunk_rows):
            yield start, {name: self.read(name, start, chunk_rows) for name in names}

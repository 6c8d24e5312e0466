"""A column store on disk: one flat binary file per column, appended in blocks, read back a slice at a time.

Scans read a bounded slice (`read`), binary searches map the file (`mapped`, which touches only the pages the
search visits), so neither the build nor a query ever holds a whole column of a million-row run.
"""

from array import array
from pathlib import Path

import numpy as np

# column name -> (numpy dtype, array typecode)
ROW_COLUMNS = {
    "task": ("<i8", "q"), "rollout": ("<i8", "q"), "file": ("<i4", "i"), "offset": ("<i8", "q"),
    "length": ("<i8", "q"), "reward": ("<f8", "d"), "input_tokens": ("<i8", "q"), "output_tokens": ("<i8", "q"),
    "agent": ("<i4", "i"), "failure": ("<i4", "i"), "tool_calls": ("<i4", "i"),
}
TASK_COLUMNS = {
    "task": ("<i8", "q"), "first": ("<i8", "q"), "count": ("<i8", "q"), "mean_reward": ("<f8", "d"),
    "failed": ("<i8", "q"),
}
FLUSH_ROWS = 1 << 16


class ColumnWriter:
    """Appends rows of named columns, writing each column's buffer out every `FLUSH_ROWS` rows."""

    def __init__(self, directory: Path, prefix: str, schema: dict[str, tuple[str, str]]) -> None:
        self._files = {name: open(directory / f"{prefix}{name}.bin", "wb") for name in schema}
        self._codes = {name: code for name, (_, code) in schema.items()}
        self._buffers = {name: array(code) for name, code in self._codes.items()}
        self.rows = 0

    def append(self, values: tuple) -> None:
        for buffer, value in zip(self._buffers.values(), values):
            buffer.append(value)
        self.rows += 1
        if len(next(iter(self._buffers.values()))) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        for name, buffer in self._buffers.items():
            buffer.tofile(self._files[name])
            self._buffers[name] = array(self._codes[name])

    def close(self) -> None:
        self.flush()
        for file in self._files.values():
            file.close()


class ColumnStore:
    """Read side of the columns `ColumnWriter` wrote under `directory` with `prefix`."""

    def __init__(self, directory: Path, prefix: str, schema: dict[str, tuple[str, str]], rows: int) -> None:
        self._paths = {name: directory / f"{prefix}{name}.bin" for name in schema}
        self._dtypes = {name: np.dtype(dtype) for name, (dtype, _) in schema.items()}
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

    def chunks(self, names: tuple[str, ...], chunk_rows: int = FLUSH_ROWS):
        """(start, {name: values}) over all rows, `chunk_rows` at a time."""
        for start in range(0, self.rows, chunk_rows):
            yield start, {name: self.read(name, start, chunk_rows) for name in names}

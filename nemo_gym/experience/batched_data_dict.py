"""BatchedDataDict: a dict of per-sample columns (lists or tensors whose first dimension is the batch)."""

import copy
from typing import Any, Generic, Iterable, Sequence, TypeVar

import torch

T = TypeVar("T")


def _take(column: Any, indices: Sequence[int]) -> Any:
    if isinstance(column, torch.Tensor):
        return column[torch.as_tensor(list(indices), dtype=torch.long)]
    return [column[i] for i in indices]


def _pad_to(tensor: torch.Tensor, length: int, value: Any) -> torch.Tensor:
    if tensor.dim() < 2 or tensor.shape[1] == length:
        return tensor
    pad = torch.full((tensor.shape[0], length - tensor.shape[1], *tensor.shape[2:]), value, dtype=tensor.dtype)
    return torch.cat([tensor, pad], dim=1)


class BatchedDataDict(dict, Generic[T]):
    """Columns of one batch; every column has the same number of rows (`size`)."""

    @property
    def size(self) -> int:
        for column in self.values():
            if isinstance(column, torch.Tensor):
                return int(column.shape[0]) if column.dim() else 1
            if isinstance(column, (list, tuple)):
                return len(column)
        return 0

    def select_indices(self, indices: Iterable[int]) -> "BatchedDataDict[T]":
        """The rows at `indices`, in that order."""
        indices = list(indices)
        return BatchedDataDict({key: _take(column, indices) for key, column in self.items()})

    def slice(self, start: int, end: int) -> "BatchedDataDict[T]":
        return self.select_indices(range(start, min(end, self.size)))

    def repeat_interleave(self, num_repeats: int) -> "BatchedDataDict[T]":
        """Each row `num_repeats` times in a row: [a, b] -> [a, a, b, b]. List rows are deep-copied so repeats
        never share mutable state (a message log appended to by one generation must not grow in its siblings)."""
        out: BatchedDataDict[T] = BatchedDataDict()
        for key, column in self.items():
            if isinstance(column, torch.Tensor):
                out[key] = column.repeat_interleave(num_repeats, dim=0)
            else:
                out[key] = [copy.deepcopy(row) for row in column for _ in range(num_repeats)]
        return out

    @classmethod
    def from_batches(cls, batches: Sequence["BatchedDataDict[T]"],
                     pad_value_dict: dict[str, Any] | None = None) -> "BatchedDataDict[T]":
        """Rows of all `batches` in order. 2-D tensors of different widths are right-padded with
        `pad_value_dict[key]` (0 by default) to the widest before concatenating."""
        pad_value_dict = pad_value_dict or {}
        out: BatchedDataDict[T] = cls()
        if not batches:
            return out
        for key in batches[0]:
            columns = [batch[key] for batch in batches]
            if isinstance(columns[0], torch.Tensor):
                width = max(c.shape[1] for c in columns) if columns[0].dim() >= 2 else 0
                out[key] = torch.cat([_pad_to(c, width, pad_value_dict.get(key, 0)) for c in columns], dim=0)
            else:
                out[key] = [row for column in columns for row in column]
        return out

    def get_dict(self) -> dict[str, Any]:
        return dict(self)

"""Exact statistics of a numeric field over millions of rollouts in constant memory: the values go to a file.

The mean, standard deviation, extremes and histogram need a pass or two over the values; the median needs them all,
which in memory would grow with the run. A radix select finds it from the file instead: it counts the top 16 bits
of every value (ordered as integers), keeps only the bucket holding the middle rank, and repeats on the next 16
bits, at most four passes, usually one or two. The result is exact, not a sketch.
"""

import math
from pathlib import Path
from typing import Iterator

import numpy as np

_CHUNK = 1 << 18  # values per read: 2 MiB
_DIGIT_BITS = 16
_LOAD_LIMIT = 1 << 18  # a bucket this small is loaded and partitioned directly


def _sortable(values: np.ndarray) -> np.ndarray:
    """float64 -> uint64 with the same order: flip every bit of negatives, only the sign bit of the others."""
    bits = values.view(np.uint64)
    return np.where(bits >> np.uint64(63), ~bits, bits | np.uint64(1 << 63))


class ValueFile:
    """The finite values of one field, appended a block at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        path.write_bytes(b"")

    def append(self, values: np.ndarray) -> None:
        finite = values[np.isfinite(values)]
        with open(self.path, "ab") as file:
            finite.astype(np.float64).tofile(file)
        self.count += len(finite)

    def chunks(self) -> Iterator[np.ndarray]:
        with open(self.path, "rb") as file:
            while len(chunk := np.fromfile(file, dtype=np.float64, count=_CHUNK)):
                yield chunk

    def statistics(self) -> dict[str, float]:
        """mean, std (sample, n - 1 as NeMo Gym's pandas; 0 for one value), min, max and median; empty when there
        are no values."""
        if not self.count:
            return {}
        total, low, high = 0.0, math.inf, -math.inf
        for chunk in self.chunks():
            total += float(chunk.sum())
            low, high = min(low, float(chunk.min())), max(high, float(chunk.max()))
        mean = total / self.count
        squares = sum(float(np.square(chunk - mean).sum()) for chunk in self.chunks())
        middle = (self.kth((self.count - 1) // 2) + self.kth(self.count // 2)) / 2
        std = math.sqrt(squares / (self.count - 1)) if self.count > 1 else 0.0
        return {"mean": mean, "std": std, "min": low, "max": high, "median": middle}

    def kth(self, rank: int) -> float:
        """The value of 0-based `rank` in sorted order."""
        prefix, matched_bits = 0, 0  # the candidates are the values whose top `matched_bits` bits equal `prefix`
        candidates = self.count
        while candidates > _LOAD_LIMIT and matched_bits < 64:
            shift = np.uint64(64 - matched_bits - _DIGIT_BITS)
            counts = np.zeros(1 << _DIGIT_BITS, dtype=np.int64)
            for keys in self._candidate_keys(prefix, matched_bits):
                counts += np.bincount((keys >> shift).astype(np.int64) & ((1 << _DIGIT_BITS) - 1),
                                      minlength=1 << _DIGIT_BITS)
            below = np.cumsum(counts)
            digit = int(np.searchsorted(below, rank, side="right"))
            rank -= int(below[digit - 1]) if digit else 0
            prefix, matched_bits = (prefix << _DIGIT_BITS) | digit, matched_bits + _DIGIT_BITS
            candidates = int(counts[digit])
        if matched_bits == 64:  # every candidate has this exact bit pattern
            key = np.array([prefix], dtype=np.uint64)
        else:
            keys = np.concatenate(list(self._candidate_keys(prefix, matched_bits)))
            key = np.partition(keys, rank)[rank:rank + 1]
        bits = np.where(key >> np.uint64(63), key & np.uint64((1 << 63) - 1), ~key)
        return float(bits.view(np.float64)[0])

    def _candidate_keys(self, prefix: int, matched_bits: int) -> Iterator[np.ndarray]:
        for chunk in self.chunks():
            keys = _sortable(chunk)
            if matched_bits:
                keys = keys[(keys >> np.uint64(64 - matched_bits)) == np.uint64(prefix)]
            yield keys

    def histogram(self, bins: int, low: float, high: float) -> tuple[list[float], list[int]]:
        counts = np.zeros(bins, dtype=np.int64)
        edges = np.linspace(low, high, bins + 1)
        for chunk in self.chunks():
            counts += np.histogram(chunk, bins=edges)[0]
        return edges.tolist(), counts.tolist()


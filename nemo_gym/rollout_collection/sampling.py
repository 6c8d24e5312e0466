"""`+sample=N +sample_seed=S`: a reproducible random subset of the input rows (`limit` stays "the first N").

The subset is chosen by row position among the non-blank rows (within `limit`, when both are given), from a
generator seeded with S alone, so the same file, N and S choose the same rows on every machine and every resume;
the manifest's fingerprint records N and S. Only the chosen positions are held in memory.
"""

import random
from pathlib import Path


def count_rows(path: Path, limit: int | None) -> int:
    """Non-blank lines of `path`, at most `limit`."""
    count = 0
    with open(path, "rb") as file:
        for line in file:
            if limit is not None and count >= limit:
                break
            if line.strip():
                count += 1
    return count


def sampled_positions(path: Path, limit: int | None, sample: int, seed: int) -> frozenset[int]:
    """0-based positions (among non-blank rows) of the `sample` rows chosen with `seed`; all of them if fewer."""
    total = count_rows(path, limit)
    return frozenset(random.Random(seed).sample(range(total), min(sample, total)))

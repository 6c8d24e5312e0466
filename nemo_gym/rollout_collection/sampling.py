"""`+sample=N +sample_seed=S`: a reproducible random subset of the input rows (`limit` stays "the first N").

The subset is chosen by row position among the non-blank rows (within `limit`, when both are given), from a
generator seeded with S alone, so the same file, N and S choose the same rows on every machine and every resume;
the manifest's fingerprint records N and S. Only the chosen positions are held in memory.
"""

import random
from pathlib import Path

from nemo_gym.run_files.rows import count_rows


def sampled_positions(path: Path, limit: int | None, sample: int, seed: int) -> frozenset[int]:
    """0-based positions (among non-blank rows) of the `sample` rows chosen with `seed`; all of them if fewer."""
    total = count_rows(path, limit)
    return frozenset(random.Random(seed).sample(range(total), min(sample, total)))

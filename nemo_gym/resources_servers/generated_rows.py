"""Where the environments' seeded data generators write their rows: a JSONL file, or standard output; and the
command line of a generator that takes only a row count and a seed."""

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import orjson


def write_rows(rows: Iterable[dict[str, Any]], out: Optional[Path]) -> None:
    data = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    if out is None:
        sys.stdout.buffer.write(data)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)


def generator_main(description: str, generate: Callable[[int, int], list[dict[str, Any]]], default_n: int,
                   argv: list[str] | None = None) -> None:
    """`--n`, `--seed` and `--out` for `generate(n, seed)`, whose rows go to the file or standard output."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--n", type=int, default=default_n, help=f"number of rows (default: {default_n})")
    parser.add_argument("--seed", type=int, default=0, help="random seed; the same seed gives the same rows")
    parser.add_argument("--out", type=Path, default=None, help="output JSONL file (default: standard output)")
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("--n must be >= 0")
    write_rows(generate(args.n, args.seed), args.out)

"""Generate number-guessing games as input rows (the collection toolkit's format).

    python -m nemo_gym.resources_servers.number_guess.generate --n 100 --seed 0 --out data/games.jsonl

Each row holds the opening instructions in `responses_create_params.input` and the game's fields (`secret`, `low`,
`high`), which are also the initial state of `game.game_state`. The same seed always gives the same rows; the
shipped `data/example.jsonl` is `--n 20 --seed 0`.
"""

import argparse
import random
from pathlib import Path
from typing import Any

from nemo_gym.resources_servers.generated_rows import write_rows
from nemo_gym.resources_servers.number_guess.game import DEFAULT_HIGH, DEFAULT_LOW, instructions

# A guess needs a few tokens; the cap keeps a rambling turn short.
MAX_OUTPUT_TOKENS = 32


def generate_rows(n: int, seed: int, low: int = DEFAULT_LOW, high: int = DEFAULT_HIGH) -> list[dict[str, Any]]:
    """`n` games with secrets drawn uniformly from [low, high]."""
    if low > high:
        raise ValueError(f"low ({low}) must not exceed high ({high})")
    rng = random.Random(seed)
    prompt = instructions(low, high)
    return [
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": prompt}],
                "max_output_tokens": MAX_OUTPUT_TOKENS,
            },
            "secret": rng.randint(low, high),
            "low": low,
            "high": high,
        }
        for _ in range(n)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Generate number-guessing games as JSONL input rows.")
    parser.add_argument("--n", type=int, default=100, help="number of games (default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="random seed; the same seed gives the same rows")
    parser.add_argument("--low", type=int, default=DEFAULT_LOW, help=f"smallest secret (default: {DEFAULT_LOW})")
    parser.add_argument("--high", type=int, default=DEFAULT_HIGH, help=f"largest secret (default: {DEFAULT_HIGH})")
    parser.add_argument("--out", type=Path, default=None, help="output JSONL file (default: standard output)")
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("--n must be >= 0")
    if args.low > args.high:
        parser.error("--low must not exceed --high")
    write_rows(generate_rows(args.n, args.seed, args.low, args.high), args.out)


if __name__ == "__main__":
    main()

"""Generate arithmetic tasks (sums of two numbers of `--digits` digits) as math environment input rows.

    python -m nemo_gym.resources_servers.math.generate_arithmetic --n 100 --seed 0 --digits 2 --out data/arith.jsonl

The same seed always gives the same rows. Each row carries its position as `id`, so a sum drawn twice stays two
tasks (identical lines are one task, as in NeMo Gym). The shipped example uses 1-digit sums: the bundled 135M model solves
about 3 in 4 of those but almost none of the 2-digit ones, and an end-to-end check wants a mix of 0 and 1 rewards.
"""

import argparse
import random
from pathlib import Path
from typing import Any

from nemo_gym.resources_servers.generated_rows import write_rows

PROMPT = "What is {a} + {b}? Answer with just the number."
MAX_OUTPUT_TOKENS = 64


def generate_rows(n: int, seed: int, digits: int = 1) -> list[dict[str, Any]]:
    """`n` input rows with a user prompt and the `expected_answer` as a string."""
    rng = random.Random(seed)
    low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
    rows = []
    for i in range(n):
        a, b = rng.randint(low, high), rng.randint(low, high)
        rows.append(
            {
                "responses_create_params": {
                    "input": [{"role": "user", "content": PROMPT.format(a=a, b=b)}],
                    # A number needs a few tokens; the cap stops a rambling sample from running to the context end.
                    "max_output_tokens": MAX_OUTPUT_TOKENS,
                },
                "expected_answer": str(a + b),
                "id": i,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Generate addition tasks as JSONL input rows for the math resources server."
    )
    parser.add_argument("--digits", type=int, default=1, help="digits per operand (default: 1)")
    parser.add_argument("--n", type=int, default=100, help="number of rows to generate (default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="random seed; the same seed gives the same rows")
    parser.add_argument("--out", type=Path, default=None, help="output JSONL file (default: standard output)")
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("--n must be >= 0")
    if not 1 <= args.digits <= 9:
        parser.error("--digits must be between 1 and 9")
    write_rows(generate_rows(args.n, args.seed, args.digits), args.out)


if __name__ == "__main__":
    main()

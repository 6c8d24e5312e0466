"""Arithmetic at four graded levels, generated from a seed: `n` problems per level, the same seed the same rows.

    level 1  one-digit addition          7 + 5
    level 2  two-digit addition          48 + 67
    level 3  two-digit multiplication    34 * 27
    level 4  two steps, small numbers    3 + 4 * 6   or   (8 + 5) - 9

Each row carries its `level`, the bare `question` and the `expected_answer`; the prompt asks for just the number,
which the math environment reads as the last number of the answer.
"""

import random
from pathlib import Path
from typing import Any, Callable

from nemo_gym.benchmark_layout.sources import write_rows
from nemo_gym.errors import ConfigError

FILE_NAME = "arithmetic.jsonl"
INSTRUCTION = "Answer with just the number."
MAX_OUTPUT_TOKENS = 64  # a number is a few tokens; the cap stops a rambling sample early


def _one_digit_sum(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return f"{a} + {b}", a + b


def _two_digit_sum(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f"{a} + {b}", a + b


def _two_digit_product(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return f"{a} * {b}", a * b


def _two_steps(rng: random.Random) -> tuple[str, int]:
    # Operands from 2 up: neither step can be skipped (no x * 1, no - 0), so both must be done right.
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 9)
    if rng.random() < 0.5:
        return f"{a} + {b} * {c}", a + b * c
    return f"({a} + {b}) - {c}", a + b - c


LEVELS: dict[int, Callable[[random.Random], tuple[str, int]]] = {
    1: _one_digit_sum, 2: _two_digit_sum, 3: _two_digit_product, 4: _two_steps,
}


def generate_rows(seed: int, n: int) -> list[dict[str, Any]]:
    """`n` rows per level, level by level."""
    rng = random.Random(seed)
    rows = []
    for level, problem in LEVELS.items():
        for _ in range(n):
            expression, value = problem(rng)
            question = f"What is {expression}?"
            rows.append({
                "responses_create_params": {
                    "input": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                    "max_output_tokens": MAX_OUTPUT_TOKENS,
                },
                "expected_answer": str(value),
                "level": level,
                "question": question,
            })
    return rows


def prepare(output_dir: Path, seed: int = 0, n: int = 50) -> Path:
    """Write `n` problems per level (4 levels) from `seed` to `output_dir/arithmetic.jsonl`."""
    if n < 1:
        raise ConfigError(f"+n must be at least 1 (problems per level), got {n}")
    return write_rows(generate_rows(seed, n), output_dir / FILE_NAME)

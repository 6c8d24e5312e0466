"""Generate short-answer questions whose right answer can be worded many ways: rows for the judge environment.

    python -m nemo_gym.resources_servers.judge.generate --n 30 --seed 0 --out data/questions.jsonl

Kinds, in turn: minutes in some hours, days in some weeks, a product, the next number of a sequence, a number
written in words, the colour two paints make. "180", "180 minutes" and "one hundred eighty" are all right for the
first, which is what a judge, not a string match, can see. Each row carries `question` and `expected_answer`; the
same seed always gives the same rows; the shipped `data/example.jsonl` is `--n 30 --seed 0`.
"""

import random
from typing import Any, Callable

from nemo_gym.resources_servers.generated_rows import generator_main

INSTRUCTION = "Answer briefly."
MAX_OUTPUT_TOKENS = 64  # a short answer; the cap stops a rambling one
ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
MIXES = {("blue", "yellow"): "green", ("red", "yellow"): "orange", ("red", "blue"): "purple",
         ("red", "white"): "pink", ("black", "white"): "grey"}


def in_words(n: int) -> str:
    """0..99 in English words: 42 -> 'forty-two'."""
    if not 0 <= n <= 99:
        raise ValueError(f"in_words covers 0..99, got {n}")
    if n < 20:
        return ONES[n]
    return TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else "")


def _minutes(rng: random.Random) -> tuple[str, str]:
    hours = rng.randint(2, 9)
    return f"How many minutes are there in {hours} hours?", str(60 * hours)


def _days(rng: random.Random) -> tuple[str, str]:
    weeks = rng.randint(2, 9)
    return f"How many days are there in {weeks} weeks?", str(7 * weeks)


def _product(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return f"What is {a} times {b}?", str(a * b)


def _sequence(rng: random.Random) -> tuple[str, str]:
    start, step = rng.randint(1, 9), rng.randint(2, 5)
    shown = ", ".join(str(start + step * i) for i in range(3))
    return f"What number comes next in the sequence {shown}?", str(start + 3 * step)


def _words(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(11, 99)
    return f"How is the number {n} written in English words?", in_words(n)


def _mix(rng: random.Random) -> tuple[str, str]:
    (first, second), result = rng.choice(sorted(MIXES.items()))
    return f"What colour do you get when you mix {first} paint with {second} paint?", result


KINDS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "minutes": _minutes, "days": _days, "product": _product, "sequence": _sequence, "words": _words, "mix": _mix,
}


def generate_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` rows, the kinds in turn."""
    rng = random.Random(seed)
    kinds = list(KINDS.items())
    rows = []
    for i in range(n):
        kind, make = kinds[i % len(kinds)]
        question, answer = make(rng)
        rows.append({
            "responses_create_params": {"input": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                                        "max_output_tokens": MAX_OUTPUT_TOKENS},
            "question": question,
            "expected_answer": answer,
            "kind": kind,
            "id": i,
        })
    return rows


def main(argv: list[str] | None = None) -> None:
    generator_main("Generate short-answer questions as JSONL input rows for the judge.", generate_rows, 30, argv)


if __name__ == "__main__":
    main()

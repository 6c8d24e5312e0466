"""Generate four-option questions, right by construction, as multiple-choice input rows.

    python -m nemo_gym.resources_servers.multiple_choice.generate --n 40 --seed 0 --out data/questions.jsonl

Kinds, in turn: a country's capital, a word's opposite, which item is a fruit, a one-digit sum, the largest of four
numbers. The right option's position cycles A, B, C, D, so every position is right equally often (what the
position-bias metrics compare against); the other options are drawn from the same kind. The same seed always gives
the same rows; the shipped `data/example.jsonl` is `--n 40 --seed 0`.
"""

import random
from typing import Any, Callable

from nemo_gym.resources_servers.generated_rows import generator_main

LETTERS = "ABCD"
INSTRUCTION = "Answer with the letter of the correct option."
MAX_OUTPUT_TOKENS = 64  # a letter and a few words; the cap stops a rambling answer

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid", "Germany": "Berlin",
            "Egypt": "Cairo", "Canada": "Ottawa", "Kenya": "Nairobi", "Peru": "Lima", "Norway": "Oslo",
            "Greece": "Athens", "Russia": "Moscow"}
OPPOSITES = {"hot": "cold", "big": "small", "fast": "slow", "happy": "sad", "up": "down", "light": "dark",
             "early": "late", "open": "closed"}
FRUITS = ["apple", "banana", "cherry", "grape", "mango", "pear"]
NOT_FRUITS = ["hammer", "chair", "river", "cloud", "pencil", "shoe", "tiger", "window"]

Question = tuple[str, str, list[str]]  # question, right option, three wrong ones


def _capital(rng: random.Random) -> Question:
    country = rng.choice(sorted(CAPITALS))
    wrong = rng.sample([city for name, city in sorted(CAPITALS.items()) if name != country], 3)
    return f"What is the capital of {country}?", CAPITALS[country], wrong


def _opposite(rng: random.Random) -> Question:
    word = rng.choice(sorted(OPPOSITES))
    wrong = rng.sample([other for key, other in sorted(OPPOSITES.items()) if key != word], 3)
    return f"What is the opposite of '{word}'?", OPPOSITES[word], wrong


def _fruit(rng: random.Random) -> Question:
    return "Which of these is a fruit?", rng.choice(FRUITS), rng.sample(NOT_FRUITS, 3)


def _sum(rng: random.Random) -> Question:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    wrong = rng.sample([n for n in range(a + b - 4, a + b + 5) if n != a + b and n >= 0], 3)
    return f"What is {a} + {b}?", str(a + b), [str(n) for n in wrong]


def _largest(rng: random.Random) -> Question:
    numbers = rng.sample(range(10, 100), 4)
    largest = max(numbers)
    return "Which number is the largest?", str(largest), [str(n) for n in numbers if n != largest]


KINDS: dict[str, Callable[[random.Random], Question]] = {
    "capital": _capital, "opposite": _opposite, "fruit": _fruit, "sum": _sum, "largest": _largest,
}


def generate_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` rows: kinds in turn, the right option at A, B, C, D in turn, the wrong ones shuffled around it."""
    rng = random.Random(seed)
    kinds = list(KINDS.items())
    rows = []
    for i in range(n):
        kind, make = kinds[i % len(kinds)]
        question, right, wrong = make(rng)
        rng.shuffle(wrong)
        position = i % len(LETTERS)
        texts = [*wrong[:position], right, *wrong[position:]]
        options = [{letter: text} for letter, text in zip(LETTERS, texts)]
        listing = "\n".join(f"{letter}) {text}" for letter, text in zip(LETTERS, texts))
        rows.append({
            "responses_create_params": {
                "input": [{"role": "user", "content": f"{question}\n{listing}\n{INSTRUCTION}"}],
                "max_output_tokens": MAX_OUTPUT_TOKENS,
            },
            "question": question,
            "options": options,
            "expected_answer": LETTERS[position],
            "kind": kind,
            "id": i,
        })
    return rows


def main(argv: list[str] | None = None) -> None:
    generator_main("Generate four-option questions as JSONL input rows.", generate_rows, 40, argv)


if __name__ == "__main__":
    main()

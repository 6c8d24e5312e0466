"""Generate instruction-following tasks: a short writing request plus one to three verifiable instructions.

    python -m nemo_gym.resources_servers.instruction_following.generate --n 40 --seed 0 --out data/tasks.jsonl

Rows are in IFEval's format (`prompt`, `instruction_id_list`, `kwargs`, `key`) plus `responses_create_params`.
Instructions of one row come from different groups and never from groups that contradict each other
(`instructions.CONFLICTS`); the first instruction of row i is kind i (in turn), so every kind is asked. The same
seed always gives the same rows; the shipped `data/example.jsonl` is `--n 40 --seed 0`.
"""

import random
from typing import Any

from nemo_gym.resources_servers.generated_rows import generator_main
from nemo_gym.resources_servers.instruction_following.instructions import CONFLICTS, INSTRUCTIONS, Instruction

TOPICS = ["a walk in the rain", "your favourite food", "how bees make honey", "a day at the beach",
          "learning to ride a bike", "why people keep pets", "a busy train station", "the first snow of winter"]
MAX_OUTPUT_TOKENS = 300  # room for a few paragraphs; the cap stops a rambling answer
MAX_INSTRUCTIONS = 3


def _compatible(chosen: list[Instruction], candidate: Instruction) -> bool:
    return all(candidate.group != other.group and frozenset((candidate.group, other.group)) not in CONFLICTS
               for other in chosen)


def generate_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` tasks; task i asks instruction kind i (in turn) and up to two more compatible ones."""
    rng = random.Random(seed)
    kinds = list(INSTRUCTIONS.values())
    rows = []
    for i in range(n):
        chosen = [kinds[i % len(kinds)]]
        wanted = rng.randint(1, MAX_INSTRUCTIONS)
        for candidate in rng.sample(kinds, len(kinds)):
            if len(chosen) == wanted:
                break
            if _compatible(chosen, candidate):
                chosen.append(candidate)
        kwargs = [instruction.draw(rng) for instruction in chosen]
        prompt = " ".join([f"Write about {rng.choice(TOPICS)}."]
                          + [instruction.say(**params) for instruction, params in zip(chosen, kwargs)])
        rows.append({
            "responses_create_params": {"input": [{"role": "user", "content": prompt}],
                                        "max_output_tokens": MAX_OUTPUT_TOKENS},
            "key": i,
            "prompt": prompt,
            "instruction_id_list": [instruction.id for instruction in chosen],
            "kwargs": kwargs,
        })
    return rows


def main(argv: list[str] | None = None) -> None:
    generator_main("Generate instruction-following tasks as JSONL input rows.", generate_rows, 40, argv)


if __name__ == "__main__":
    main()

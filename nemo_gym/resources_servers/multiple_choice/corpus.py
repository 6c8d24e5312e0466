"""The hand-labelled answers `extraction.py` is measured against, and its agreement with them.

`data/answer_corpus.jsonl` holds one answer a line: `kind` (the form it is written in), `text`, `num_options`,
`options` (the options' texts, where the answer was written for a question that has them) and `label`: the letter a
careful human grader reads in it, or null where a grader reads no single option. Each label was written by reasoning
about the answer, never by running the extractor. The kinds `second_batch` and `third_batch` were written after the
extraction rules, to see how the rules read forms they were not written for (docs/environments.md has those first
readings).
"""

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from string import ascii_uppercase
from typing import Any

import orjson

from nemo_gym.resources_servers.multiple_choice.extraction import extract_choice

CORPUS = Path(__file__).resolve().parent / "data" / "answer_corpus.jsonl"


@dataclass(frozen=True)
class LabelledAnswer:
    kind: str
    text: str
    options: dict[str, str]  # letter -> text ("" where the answer was written without the options' texts)
    label: str | None


def load_corpus(path: Path = CORPUS) -> list[LabelledAnswer]:
    answers = []
    for line in path.read_bytes().splitlines():
        row = orjson.loads(line)
        texts = row.get("options") or [""] * row["num_options"]
        if len(texts) != row["num_options"]:
            raise ValueError(f"{path}: {row['text']!r} has {len(texts)} options' texts for {row['num_options']} "
                             f"options")
        answers.append(LabelledAnswer(row["kind"], row["text"], dict(zip(ascii_uppercase, texts)), row["label"]))
    return answers


def agreement(answers: list[LabelledAnswer]) -> dict[str, Any]:
    """How often the extractor reads the grader's label, overall and per kind, and how it reads the rest: a letter
    other than the label (a wrong choice, the worse miss) or none where the grader reads one."""
    agree, by_kind, missed = Counter[str](), Counter[str](), []
    for answer in answers:
        read, form = extract_choice(answer.text, answer.options)
        by_kind[answer.kind] += 1
        if read == answer.label:
            agree[answer.kind] += 1
        else:
            missed.append({"kind": answer.kind, "text": answer.text, "label": answer.label, "read": read,
                           "form": form})
    return {
        "answers": len(answers),
        "agree": sum(agree.values()),
        "agreement": round(sum(agree.values()) / len(answers), 4),
        "read_as_another_letter": sum(1 for miss in missed if miss["read"] is not None),
        "read_as_none": sum(1 for miss in missed if miss["read"] is None),
        "by_kind": {kind: {"answers": count, "agree": agree[kind]} for kind, count in by_kind.items()},
        "disagreements": missed,
    }

"""The verifiable instructions: their ids and parameters (IFEval's, so IFEval-format rows of these kinds run here),
how each is said to the model, how the generator draws its parameters, and which check decides it.

A row lists its instructions as IFEval does: `instruction_id_list` and, in the same order, `kwargs` (a null
parameter counts as absent, as in IFEval's published rows). `InstructionError` names what is wrong with one.
"""

import random
from dataclasses import dataclass
from typing import Any, Callable

from nemo_gym.resources_servers.instruction_following import checks
from nemo_gym.resources_servers.instruction_following.checks import AT_LEAST, LESS_THAN, RELATIONS

Kwargs = dict[str, Any]

TOPIC_WORDS = ["river", "garden", "music", "winter", "bread", "robot", "ocean", "forest", "city", "friend"]
END_PHRASES = ["Is there anything else I can help with?", "That is all for today.", "Thank you for reading."]


class InstructionError(ValueError):
    """An instruction a row names that this environment cannot check as given."""


@dataclass(frozen=True)
class Instruction:
    id: str
    group: str  # the generator never puts two instructions of one group in a row
    params: dict[str, type]  # name -> int, str or list (of strings)
    check: Callable[..., bool]  # check(text, **params)
    say: Callable[..., str]  # the sentence that asks for it, from its parameters
    draw: Callable[[random.Random], Kwargs]  # parameters for the generator


def _relation(value: str) -> str:
    return "fewer than" if value == LESS_THAN else "at least"


def _listed(items: list[str]) -> str:
    return ", ".join(f"'{item}'" for item in items)


INSTRUCTIONS: dict[str, Instruction] = {instruction.id: instruction for instruction in [
    Instruction("length_constraints:number_words", "length", {"relation": str, "num_words": int},
                checks.number_words,
                lambda relation, num_words: f"Use {_relation(relation)} {num_words} words.",
                lambda rng: {"relation": rng.choice(RELATIONS), "num_words": rng.choice([20, 40, 60])}),
    Instruction("length_constraints:number_sentences", "length", {"relation": str, "num_sentences": int},
                checks.number_sentences,
                lambda relation, num_sentences: f"Write {_relation(relation)} {num_sentences} sentences.",
                lambda rng: {"relation": rng.choice(RELATIONS), "num_sentences": rng.randint(2, 5)}),
    Instruction("length_constraints:number_paragraphs", "structure", {"num_paragraphs": int},
                checks.number_paragraphs,
                lambda num_paragraphs: (f"Write exactly {num_paragraphs} paragraphs, separated from each other by a "
                                        f"line holding only ***."),
                lambda rng: {"num_paragraphs": rng.randint(2, 3)}),
    Instruction("keywords:existence", "keywords", {"keywords": list}, checks.keywords_existence,
                lambda keywords: f"Mention each of these words: {_listed(keywords)}.",
                lambda rng: {"keywords": rng.sample(TOPIC_WORDS, 2)}),
    Instruction("keywords:forbidden_words", "keywords", {"forbidden_words": list}, checks.forbidden_words,
                lambda forbidden_words: f"Never use these words: {_listed(forbidden_words)}.",
                lambda rng: {"forbidden_words": rng.sample(["the", "and", "very", "good", "is"], 2)}),
    Instruction("keywords:frequency", "keywords", {"keyword": str, "relation": str, "frequency": int},
                checks.keyword_frequency,
                lambda keyword, relation, frequency: (f"Use the word '{keyword}' {_relation(relation)} "
                                                      f"{frequency} times."),
                lambda rng: {"keyword": rng.choice(TOPIC_WORDS), "relation": rng.choice(RELATIONS),
                             "frequency": rng.randint(2, 3)}),
    Instruction("keywords:letter_frequency", "letters", {"letter": str, "let_relation": str, "let_frequency": int},
                checks.letter_frequency,
                lambda letter, let_relation, let_frequency: (f"Use the letter '{letter}' {_relation(let_relation)} "
                                                             f"{let_frequency} times."),
                lambda rng: {"letter": rng.choice("qxzjk"), "let_relation": LESS_THAN, "let_frequency": 3}),
    Instruction("change_case:english_lowercase", "case", {}, checks.lowercase,
                lambda: "Write only in lowercase letters: no capital letter anywhere.", lambda rng: {}),
    Instruction("change_case:english_capital", "case", {}, checks.capitals,
                lambda: "Write only in capital letters: no lowercase letter anywhere.", lambda rng: {}),
    Instruction("change_case:capital_word_frequency", "case", {"capital_relation": str, "capital_frequency": int},
                checks.capital_word_frequency,
                lambda capital_relation, capital_frequency: (f"Write {_relation(capital_relation)} "
                                                             f"{capital_frequency} words entirely in capital letters."),
                lambda rng: {"capital_relation": AT_LEAST, "capital_frequency": rng.randint(1, 3)}),
    Instruction("detectable_format:json_format", "whole", {}, checks.json_format,
                lambda: "Answer with one JSON value and nothing else (a ```json fence around it is fine).",
                lambda rng: {}),
    Instruction("detectable_format:number_bullet_lists", "structure", {"num_bullets": int}, checks.bullet_lists,
                lambda num_bullets: f"Make a list of exactly {num_bullets} bullet points, each line starting with '* '.",
                lambda rng: {"num_bullets": rng.randint(2, 4)}),
    Instruction("detectable_format:title", "title", {}, checks.title,
                lambda: "Give your answer a title inside double angle brackets, like <<my title>>.", lambda rng: {}),
    Instruction("detectable_format:number_highlighted_sections", "highlights", {"num_highlights": int},
                checks.highlighted_sections,
                lambda num_highlights: (f"Highlight at least {num_highlights} parts of your answer with asterisks, "
                                        f"like *this part*."),
                lambda rng: {"num_highlights": rng.randint(2, 3)}),
    Instruction("detectable_format:multiple_sections", "structure", {"section_spliter": str, "num_sections": int},
                checks.multiple_sections,
                lambda section_spliter, num_sections: (f"Split your answer into {num_sections} sections, each "
                                                       f"starting with '{section_spliter} <number>' (such as "
                                                       f"'{section_spliter} 1')."),
                lambda rng: {"section_spliter": rng.choice(["Section", "Part"]), "num_sections": rng.randint(2, 3)}),
    Instruction("detectable_content:number_placeholders", "placeholders", {"num_placeholders": int},
                checks.placeholders,
                lambda num_placeholders: (f"Put at least {num_placeholders} placeholders in square brackets, like "
                                          f"[name], in your answer."),
                lambda rng: {"num_placeholders": rng.randint(2, 3)}),
    Instruction("detectable_content:postscript", "ending", {"postscript_marker": str}, checks.postscript,
                lambda postscript_marker: f"End with a postscript that starts with {postscript_marker}",
                lambda rng: {"postscript_marker": rng.choice(["P.S.", "P.P.S."])}),
    Instruction("startend:end_checker", "ending", {"end_phrase": str}, checks.end_phrase,
                lambda end_phrase: f"End your answer with the exact phrase \"{end_phrase}\" and nothing after it.",
                lambda rng: {"end_phrase": rng.choice(END_PHRASES)}),
    Instruction("startend:quotation", "ending", {}, checks.quotation,
                lambda: "Put your whole answer inside double quotation marks.", lambda rng: {}),
    Instruction("punctuation:no_comma", "punctuation", {}, checks.no_comma,
                lambda: "Do not use any commas.", lambda rng: {}),
]}

# Groups whose instructions contradict each other (capitals against a mixed-case ending or section marker; JSON
# against any other shape of the answer): the generator never combines them.
CONFLICTS = {frozenset(pair) for pair in [("case", "ending"), ("case", "structure"), ("whole", "structure"),
                                         ("whole", "ending"), ("whole", "title"), ("whole", "highlights"),
                                         ("whole", "placeholders"), ("whole", "punctuation")]}


def _valid(name: str, kind: type, value: Any) -> bool:
    if kind is int:
        return type(value) is int and value >= 0
    if kind is list:
        return isinstance(value, list) and bool(value) and all(isinstance(item, str) and item for item in value)
    return isinstance(value, str) and bool(value) and (not name.endswith("relation") or value in RELATIONS)


def checked_kwargs(instruction_id: Any, kwargs: Any) -> tuple[Instruction, Kwargs]:
    """The instruction of `instruction_id` and its parameters, with null ones dropped; InstructionError names what
    is missing, unknown or of the wrong type."""
    instruction = INSTRUCTIONS.get(instruction_id) if isinstance(instruction_id, str) else None
    if instruction is None:
        raise InstructionError(f"unknown instruction id {instruction_id!r} (known: {', '.join(INSTRUCTIONS)})")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise InstructionError(f"{instruction.id}: its kwargs must be an object, got {kwargs!r}")
    given = {name: value for name, value in kwargs.items() if value is not None}
    unknown = sorted(set(given) - set(instruction.params))
    missing = sorted(set(instruction.params) - set(given))
    if unknown or missing:
        raise InstructionError(f"{instruction.id}: takes {sorted(instruction.params) or 'no parameters'}"
                               + (f"; unknown {unknown}" if unknown else "") + (f"; missing {missing}" if missing else ""))
    for name, kind in instruction.params.items():
        if not _valid(name, kind, given[name]):
            expected = {int: "a whole number >= 0", list: "a non-empty list of strings"}.get(kind, "a non-empty string")
            if name.endswith("relation"):
                expected = f"one of {list(RELATIONS)}"
            raise InstructionError(f"{instruction.id}: '{name}' must be {expected}, got {given[name]!r}")
    return instruction, given

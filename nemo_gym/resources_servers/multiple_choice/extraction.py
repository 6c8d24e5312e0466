"""Which option an answer chose, read from the forms models use, most explicit first:

    letter        the whole answer is the letter: "B", "(B)", "[b]", "**B**", "B."
    answer_line   an answer statement, the last one counts: "Answer: B", "The answer is (B)", "correct option: **B**"
    boxed         "\\boxed{B}"
    leading       the answer opens with the letter and its option: "B) Paris", "B. Paris is the capital"
    option_text   the answer names exactly one option's text ("Paris", "It is Paris."), as a whole phrase

A letter counts only when the question has that option; an answer that names several options' texts chose none.
"""

import re
import string
from typing import Any

LETTER = "letter"
ANSWER_LINE = "answer_line"
BOXED = "boxed"
LEADING = "leading"
OPTION_TEXT = "option_text"
NO_ANSWER = "none"

_WHOLE_LETTER = re.compile(r"[\s*_]*[(\[]?\s*([A-Za-z])\s*[)\]]?[\s*_]*[.:]?\s*")
# Upper-case letters only here: "the answer is a bit long" must not read as option A.
_ANSWER_LINE = re.compile(r"(?i:answer|option|choice)\s*(?:(?i:is)\s*)?[:\-]?\s*[*_]*\s*[(\[]?\s*([A-Z])(?![A-Za-z0-9])")
_BOXED = re.compile(r"\\boxed\{\s*\(?\s*([A-Za-z])\s*\)?\s*\}")
_LEADING = re.compile(r"\s*[*_]*\(?([A-Z])[*_]*\s*[).:]\s+\S")
_PUNCTUATION = str.maketrans({char: " " for char in string.punctuation})


class OptionsError(ValueError):
    """A row whose `options` are not NeMo Gym's list of one-entry objects, {"A": "text"}."""


def option_texts(options: Any) -> dict[str, str]:
    """Letter -> option text, from a row's `options`: a list of one-entry objects such as [{"A": "Paris"}, ...]."""
    if not isinstance(options, list) or not options:
        raise OptionsError("'options' must be a non-empty list of one-entry objects such as {\"A\": \"Paris\"}")
    found: dict[str, str] = {}
    for option in options:
        if not isinstance(option, dict) or len(option) != 1:
            raise OptionsError(f"each option must be one-entry object such as {{\"A\": \"Paris\"}}, got {option!r}")
        (letter, text), = option.items()
        if not (isinstance(letter, str) and len(letter) == 1 and letter.isupper() and isinstance(text, str)):
            raise OptionsError(f"an option's key is one capital letter and its value a string, got {option!r}")
        if letter in found:
            raise OptionsError(f"option {letter} appears twice")
        found[letter] = text
    return found


def _normalized(text: str) -> str:
    return " ".join(text.lower().translate(_PUNCTUATION).split())


def _named_option(text: str, options: dict[str, str]) -> str | None:
    """The one option whose text the answer names as a whole phrase (None for none or several)."""
    answer = f" {_normalized(text)} "
    named = [letter for letter, option in options.items()
             if _normalized(option) and f" {_normalized(option)} " in answer]
    if len(named) > 1:
        # "Paris" inside "Paris, Texas": a longer option that contains the others is the one named.
        longest = max(named, key=lambda letter: len(_normalized(options[letter])))
        inside = all(f" {_normalized(options[letter])} " in f" {_normalized(options[longest])} " for letter in named)
        return longest if inside else None
    return named[0] if named else None


def extract_choice(text: str, options: dict[str, str]) -> tuple[str | None, str]:
    """(chosen letter or None, the form it was read from) for the answer `text` to a question with `options`."""
    whole = _WHOLE_LETTER.fullmatch(text)
    if whole and whole.group(1).upper() in options:
        return whole.group(1).upper(), LETTER
    stated = [match.group(1) for match in _ANSWER_LINE.finditer(text) if match.group(1) in options]
    if stated:
        return stated[-1], ANSWER_LINE
    boxed = [match.group(1).upper() for match in _BOXED.finditer(text) if match.group(1).upper() in options]
    if boxed:
        return boxed[-1], BOXED
    leading = _LEADING.match(text)
    if leading and leading.group(1) in options:
        return leading.group(1), LEADING
    named = _named_option(text, options)
    if named is not None:
        return named, OPTION_TEXT
    return None, NO_ANSWER

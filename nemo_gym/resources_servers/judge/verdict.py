"""What the judge is asked and how its answer is read: the prompt templates of the two modes and the strict rule for
a verdict.

    equivalence   are two answers to the question the same? Asked twice, the expected answer first and then the
                  policy's answer first, so that a judge that favours one position cannot decide alone.
                  Placeholders: {question}, {first_answer}, {second_answer} (the last two required).
    correctness   is the answer right? Asked once. Placeholders: {question}, {answer} (required),
                  {expected_answer} (a reference, when the row has one).

A verdict is strict: the judge's text must hold exactly one verdict label, once. No label, both labels, or one label
twice is no verdict (the judge's call then failed, see app.py), whatever else the text says.
"""

import string
from dataclasses import dataclass
from typing import Literal

Mode = Literal["equivalence", "correctness"]


@dataclass(frozen=True)
class ModeDefaults:
    template: str
    positive: str
    negative: str
    placeholders: frozenset[str]  # the template may use these
    required: frozenset[str]  # and must use these


MODES: dict[str, ModeDefaults] = {
    "equivalence": ModeDefaults(
        template=("Decide whether two answers to the same question give the same final answer. Wording, units "
                  "written out or not, and extra explanation do not matter; a different value or claim does.\n\n"
                  "Question: {question}\n\nFirst answer: {first_answer}\n\nSecond answer: {second_answer}\n\n"
                  "Reply with [[A=B]] if they give the same final answer, or [[A!=B]] if they do not. Write the "
                  "verdict exactly once."),
        positive="[[A=B]]", negative="[[A!=B]]",
        placeholders=frozenset({"question", "first_answer", "second_answer"}),
        required=frozenset({"first_answer", "second_answer"}),
    ),
    "correctness": ModeDefaults(
        template=("Decide whether the response answers the question correctly.\n\nQuestion: {question}\n\n"
                  "Reference answer: {expected_answer}\n\nResponse: {answer}\n\nReply with [[CORRECT]] or "
                  "[[INCORRECT]]. Write the verdict exactly once."),
        positive="[[CORRECT]]", negative="[[INCORRECT]]",
        placeholders=frozenset({"question", "answer", "expected_answer"}),
        required=frozenset({"answer"}),
    ),
}


def template_fields(template: str) -> set[str]:
    """The placeholders a template uses; ValueError for one that is not a plain `{name}`."""
    fields = set()
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise ValueError(f"placeholder {{{name}}} must be a plain {{name}} (write {{{{ and }}}} for braces)")
        fields.add(name)
    return fields


def check_template(mode: Mode, template: str) -> None:
    """ValueError naming what the template of `mode` uses wrongly or misses."""
    fields = template_fields(template)
    defaults = MODES[mode]
    unknown, missing = fields - defaults.placeholders, defaults.required - fields
    if unknown:
        raise ValueError(f"the {mode} prompt template uses {sorted(unknown)}; it may use "
                         f"{sorted(defaults.placeholders)}")
    if missing:
        raise ValueError(f"the {mode} prompt template must use {sorted(missing)}")


def check_labels(positive: str, negative: str) -> None:
    """ValueError unless the two labels are non-blank and neither holds the other (a strict parse needs that)."""
    if not positive.strip() or not negative.strip():
        raise ValueError("verdict labels must not be blank")
    if positive in negative or negative in positive:
        raise ValueError(f"verdict labels {positive!r} and {negative!r}: neither may contain the other")


def parse_verdict(text: str, positive: str, negative: str) -> bool | None:
    """True or False for exactly one label occurring exactly once in `text`; None for no verdict."""
    found = text.count(positive), text.count(negative)
    if found == (1, 0):
        return True
    if found == (0, 1):
        return False
    return None

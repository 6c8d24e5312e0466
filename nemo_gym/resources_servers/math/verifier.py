"""Math answer checking, free of any server: shared by the math resources server and the experience layer's
MathEnvironment.

The answer in a text is the content of its last `\\boxed{...}`, else its last number. Equality is decided by
math_verify (so `1/2`, `0.5` and `\\frac{1}{2}` agree), or by plain numeric comparison where math_verify cannot
parse one side. math_verify guards its sympy work with SIGALRM, which only works in a process's main thread:
callers on an event loop run `answers_match` in a process pool.
"""

import re

from math_verify import parse, verify

BOXED = "\\boxed{"
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`, braces matched; None when there is none or it is never closed."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    depth = 1
    for i in range(start + len(BOXED), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + len(BOXED) : i].strip()
    return None


def extract_answer(text: str) -> str | None:
    """The last boxed answer in `text`, else its last number, else None."""
    boxed = last_boxed(text)
    if boxed:
        return boxed
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def answers_match(predicted: str, expected: str) -> bool:
    """math_verify equivalence, or exact numeric equality where math_verify cannot parse either side."""
    gold, pred = parse(f"${expected}$"), parse(f"${predicted}$")
    if gold and pred:
        return verify(gold, pred)
    a, b = _as_number(predicted), _as_number(expected)
    return a is not None and a == b

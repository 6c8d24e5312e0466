"""The checks behind the verifiable instructions: pure functions of the answer's text (and the instruction's
parameters), each True when the text follows the instruction. `instructions.py` names them and says them to the
model; the rules here are this environment's own, written down in each docstring.
"""

import re

import orjson

LESS_THAN = "less than"
AT_LEAST = "at least"
RELATIONS = (LESS_THAN, AT_LEAST)

# Every pattern takes time linear in the answer, whatever the answer, so a verification never stalls its server:
# runs are read possessively (*+, ++: never re-read to split them another way), a match never starts inside a run
# it could have started at the head of, and the per-line patterns start only at a line's start.
_WORD = re.compile(r"[^\W_]++(?:['’-][^\W_]++)*+")
_SENTENCE_END = re.compile(r"(?<![.!?])[.!?]++(?=\s|$)")
_DIVIDER = re.compile(r"^[ \t]*+\*\*\*[ \t]*+$", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*+[*-][ \t]++\S", re.MULTILINE)


def _span(opener: str, closer: str) -> re.Pattern[str]:
    """`opener`, content, `closer`, the content holding a non-space and no line break, and no bracket character
    (`opener[0]`, `closer[0]`) but at most one, which then is that non-space: "<<<>>" is a title, "[]]" a
    placeholder, as when the rule was first written. A span with a bracket character inside is tried first, as it
    was then, so the spans counted are the same."""
    brackets = re.escape(opener[0] + closer[0])
    plain = rf"[^{brackets}\n]"
    return re.compile(rf"{re.escape(opener)}(?:{plain}*+[{brackets}]{plain}*+|(?={plain}*?[^\s{brackets}]){plain}*+)"
                      rf"{re.escape(closer)}")


_TITLE = _span("<<", ">>")
_HIGHLIGHT = re.compile(r"\*(?=[^\n*]*?[^\s*])[^\n*]*+\*")
_PLACEHOLDER = _span("[", "]")
_FENCE = re.compile(r"```[a-zA-Z]*+\s*+(.*?)\n?```", re.DOTALL)


def compare(count: int, relation: str, n: int) -> bool:
    """`count` against `n`: 'less than' is count < n, 'at least' is count >= n."""
    return count < n if relation == LESS_THAN else count >= n


def words(text: str) -> list[str]:
    """Runs of letters and digits, with inner apostrophes and hyphens ("don't", "well-known" are one word)."""
    return _WORD.findall(text)


def number_words(text: str, relation: str, num_words: int) -> bool:
    return compare(len(words(text)), relation, num_words)


def number_sentences(text: str, relation: str, num_sentences: int) -> bool:
    """A sentence ends with . ! or ? before a space or the end; trailing text without one is a sentence too."""
    sentences = sum(1 for piece in _SENTENCE_END.split(text) if _WORD.search(piece))
    return compare(sentences, relation, num_sentences)


def number_paragraphs(text: str, num_paragraphs: int) -> bool:
    """Exactly `num_paragraphs` non-empty paragraphs between lines holding only `***`."""
    paragraphs = _DIVIDER.split(text)
    return len(paragraphs) == num_paragraphs and all(paragraph.strip() for paragraph in paragraphs)


def _whole_word(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", re.IGNORECASE)


def keywords_existence(text: str, keywords: list[str]) -> bool:
    """Every keyword appears as a whole word (any case)."""
    return all(_whole_word(keyword).search(text) for keyword in keywords)


def forbidden_words(text: str, forbidden_words: list[str]) -> bool:
    """No forbidden word appears as a whole word (any case)."""
    return not any(_whole_word(word).search(text) for word in forbidden_words)


def keyword_frequency(text: str, keyword: str, relation: str, frequency: int) -> bool:
    return compare(len(_whole_word(keyword).findall(text)), relation, frequency)


def letter_frequency(text: str, letter: str, let_relation: str, let_frequency: int) -> bool:
    """Occurrences of the letter, either case."""
    return compare(text.lower().count(letter.lower()), let_relation, let_frequency)


def lowercase(text: str) -> bool:
    """No upper-case letter, and at least one letter."""
    return text == text.lower() and any(char.isalpha() for char in text)


def capitals(text: str) -> bool:
    """No lower-case letter, and at least one letter."""
    return text == text.upper() and any(char.isalpha() for char in text)


def capital_word_frequency(text: str, capital_relation: str, capital_frequency: int) -> bool:
    """Words of two or more letters written all in capitals ("I" and "A" do not count)."""
    count = sum(1 for word in words(text) if len(word) > 1 and word.isupper())
    return compare(count, capital_relation, capital_frequency)


def json_format(text: str) -> bool:
    """The whole answer is one JSON value, optionally inside a ``` or ```json fence."""
    body = text.strip()
    fenced = _FENCE.fullmatch(body)
    try:
        orjson.loads(fenced.group(1) if fenced else body)
    except orjson.JSONDecodeError:
        return False
    return True


def bullet_lists(text: str, num_bullets: int) -> bool:
    """Exactly `num_bullets` lines that start with `* ` or `- `."""
    return len(_BULLET.findall(text)) == num_bullets


def title(text: str) -> bool:
    """A title between double angle brackets, <<like this>>."""
    return _TITLE.search(text) is not None


def highlighted_sections(text: str, num_highlights: int) -> bool:
    """At least `num_highlights` spans between asterisks on one line, *like this* (or **this**)."""
    return len(_HIGHLIGHT.findall(text)) >= num_highlights


def multiple_sections(text: str, section_spliter: str, num_sections: int) -> bool:
    """Exactly `num_sections` lines that start with the marker and a number, `Section 1`, `Section 2`, ..."""
    marks = re.findall(rf"^[ \t#*]*{re.escape(section_spliter)}[ \t]+\d+", text, re.MULTILINE | re.IGNORECASE)
    return len(marks) == num_sections


def placeholders(text: str, num_placeholders: int) -> bool:
    """At least `num_placeholders` non-empty spans in square brackets, [like this]."""
    return len(_PLACEHOLDER.findall(text)) >= num_placeholders


def postscript(text: str, postscript_marker: str) -> bool:
    """A line that starts with the marker (any case) and says something after it."""
    pattern = rf"^[ \t]*{re.escape(postscript_marker)}[ \t]*\S"
    return re.search(pattern, text, re.MULTILINE | re.IGNORECASE) is not None


def end_phrase(text: str, end_phrase: str) -> bool:
    """The answer ends with the phrase (any case, surrounding spaces ignored)."""
    return text.strip().lower().endswith(end_phrase.strip().lower())


def quotation(text: str) -> bool:
    """The whole answer is inside double quotation marks."""
    body = text.strip()
    return len(body) > 1 and body[0] == '"' and body[-1] == '"'


def no_comma(text: str) -> bool:
    return "," not in text

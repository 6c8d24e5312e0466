"""The checks behind the verifiable instructions: pure functions of the answer's text (and the instruction's
parameters), each True when the text follows the instruction. `instructions.py` names them and says them to the
model. Each rule is IFEval's (lm-eval's ifeval checkers give the same verdicts on a corpus of 2,000 and more answers:
benchmarks/results/ifeval_agreement.json), read in time linear in the answer, with two differences written down in
docs/environments.md: a keyword or section marker is matched as text, not as a regular expression; and
number_sentences and capital_word_frequency, whose IFEval rules need NLTK's punkt models, keep rules of their own.
The two case kinds ask langdetect whether the text is English, as IFEval does (`english`), unless the server's
`check_english` setting is off.
"""

import re
import threading
from typing import Callable

import orjson

LESS_THAN = "less than"
AT_LEAST = "at least"
RELATIONS = (LESS_THAN, AT_LEAST)

# Every check takes time linear in the answer, whatever the answer, so a verification never stalls its server:
# runs are read possessively (*+, ++: never re-read to split them another way), no pattern can start a match at
# every character of a run and read the run each time, and the rules IFEval writes with such a pattern (a bracket
# span, a title, a list item after blank lines) are scanned with str.find instead.
_WORD = re.compile(r"[^\W_]++(?:['’-][^\W_]++)*+")
_SENTENCE_END = re.compile(r"(?<![.!?])[.!?]++(?=\s|$)")
_IFEVAL_WORD = re.compile(r"\w++")
_PARAGRAPH_DIVIDER = re.compile(r"\s?\*\*\*\s?")
_SPACE_RUN = re.compile(r"\s*+")
_SINGLE_HIGHLIGHT = re.compile(r"\*[^\n*]*+\*")
_DOUBLE_HIGHLIGHT = re.compile(r"\*\*[^\n*]*+\*\*")
_POSTSCRIPTS = {"P.P.S": re.compile(r"p\.\s?p\.\s?s", re.IGNORECASE), "P.S.": re.compile(r"p\.\s?s\.", re.IGNORECASE)}
_FENCE = re.compile(r"```[a-zA-Z]*+\s*+(.*?)\n?```", re.DOTALL)


def compare(count: int, relation: str, n: int) -> bool:
    """`count` against `n`: 'less than' is count < n, 'at least' is count >= n."""
    return count < n if relation == LESS_THAN else count >= n


def words(text: str) -> list[str]:
    """Runs of letters and digits, with inner apostrophes and hyphens ("don't", "well-known" are one word)."""
    return _WORD.findall(text)


def number_words(text: str, relation: str, num_words: int) -> bool:
    """Words are runs of letters, digits and underscores ("don't" is two)."""
    return compare(sum(1 for _ in _IFEVAL_WORD.finditer(text)), relation, num_words)


def number_sentences(text: str, relation: str, num_sentences: int) -> bool:
    """A sentence ends with . ! or ? before a space or the end; trailing text without one is a sentence too."""
    sentences = sum(1 for piece in _SENTENCE_END.split(text) if _WORD.search(piece))
    return compare(sentences, relation, num_sentences)


def number_paragraphs(text: str, num_paragraphs: int) -> bool:
    """Exactly `num_paragraphs` paragraphs, the text split at each `***` (a space or line break on either side goes
    with it); a blank piece at the start or the end is no paragraph, a blank one between two dividers breaks the
    rule."""
    pieces = _PARAGRAPH_DIVIDER.split(text)
    blank = [not piece.strip() for piece in pieces]
    if any(blank[1:-1]):
        return False
    return len(pieces) - blank[0] - (blank[-1] if len(pieces) > 1 else False) == num_paragraphs


def _anywhere(word: str) -> re.Pattern[str]:
    return re.compile(re.escape(word), re.IGNORECASE)


def keywords_existence(text: str, keywords: list[str]) -> bool:
    """Every keyword appears, in any case, also inside a longer word ("garden" in "gardener")."""
    return all(_anywhere(keyword).search(text) for keyword in keywords)


def forbidden_words(text: str, forbidden_words: list[str]) -> bool:
    """No forbidden word appears as a whole word (any case; "very" in "every" does not count)."""
    return not any(re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE) for word in forbidden_words)


def keyword_frequency(text: str, keyword: str, relation: str, frequency: int) -> bool:
    """Occurrences of the keyword in any case, also inside longer words, none overlapping."""
    return compare(sum(1 for _ in _anywhere(keyword).finditer(text)), relation, frequency)


def letter_frequency(text: str, letter: str, let_relation: str, let_frequency: int) -> bool:
    """Occurrences of the letter, either case."""
    return compare(text.lower().count(letter.lower()), let_relation, let_frequency)


_DETECTOR_LOCK = threading.Lock()


def _language_detector() -> Callable[[str], str]:
    """langdetect's `detect`, its profiles loaded once under a lock: verifications run in worker threads, and two
    first calls at once would load every profile twice, which langdetect refuses (every text then "followed")."""
    with _DETECTOR_LOCK:
        import langdetect  # its profiles load on first use, a second or so: only where a case kind is checked
        from langdetect import detector_factory

        langdetect.DetectorFactory.seed = 0  # its answer is random otherwise
        detector_factory.init_factory()  # idempotent once loaded
        return langdetect.detect


def english(text: str) -> bool:
    """langdetect reads `text` as English (it reads at most its first 10,000 characters), or cannot tell: IFEval's
    rule, which counts a text langdetect cannot read as followed."""
    from langdetect.lang_detect_exception import LangDetectException

    try:
        return _language_detector()(text) == "en"
    except LangDetectException:
        return True


def lowercase(text: str) -> bool:
    """No upper-case letter, and at least one lower-case one (`str.islower`); the language is `english`'s to say."""
    return text.islower()


def capitals(text: str) -> bool:
    """No lower-case letter, and at least one upper-case one (`str.isupper`); the language is `english`'s to say."""
    return text.isupper()


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


def _line_heads(text: str, head: Callable[[str, int], int]) -> int:
    """How many times, scanning line starts, `head(text, at)` finds its mark at the first non-space character from
    a line start (blank lines before it included), where it returns the index its line's rest starts at (else -1);
    each found mark takes the rest of that line. Line starts inside a blank run reach the same character, so each
    run is read once."""
    count, start = 0, 0
    while True:
        spaces = _SPACE_RUN.match(text, start)  # always matches (maybe nothing)
        at = spaces.end() if spaces else start
        rest = head(text, at)
        if rest >= 0:
            count += 1
        end = text.find("\n", rest if rest >= 0 else at)
        if end < 0:
            return count
        start = end + 1


def _star_item(text: str, at: int) -> int:
    return at + 2 if text.startswith("*", at) and at + 1 < len(text) and text[at + 1] != "*" else -1


def _dash_item(text: str, at: int) -> int:
    return at + 1 if text.startswith("-", at) else -1


def bullet_lists(text: str, num_bullets: int) -> bool:
    """Exactly `num_bullets` items: a line starting (after spaces) with `*` and then a character other than `*`, or
    with `-`."""
    return _line_heads(text, _star_item) + _line_heads(text, _dash_item) == num_bullets


def title(text: str) -> bool:
    """A title between double angle brackets on one line, <<like this>>: on some line, from its first `<<` to its
    last `>>`, something besides brackets and spaces."""
    for line in text.split("\n"):
        first, last = line.find("<<"), line.rfind(">>")
        if first >= 0 and last >= first + 3 and line[first:last + 2].lstrip("<").rstrip(">").strip():
            return True
    return False


def highlighted_sections(text: str, num_highlights: int) -> bool:
    """At least `num_highlights` non-blank spans between single asterisks on one line, *like this*, each **double**
    one counted once more."""
    singles = sum(1 for span in _SINGLE_HIGHLIGHT.findall(text) if span.strip("*").strip())
    doubles = sum(1 for span in _DOUBLE_HIGHLIGHT.findall(text) if span[2:-2].strip())
    return singles + doubles >= num_highlights


def multiple_sections(text: str, section_spliter: str, num_sections: int) -> bool:
    """At least `num_sections` section marks: the marker (in its own case) and a number, a space between them or
    not, anywhere (`Section 1`, `Section2`)."""
    marks = re.split(rf"\s?{re.escape(section_spliter)}\s?\d++\s?", text)
    return len(marks) - 1 >= num_sections


def placeholders(text: str, num_placeholders: int) -> bool:
    """At least `num_placeholders` spans in square brackets on one line, [like this] (or [] or [ ]): from an opening
    bracket to the first closing one after it."""
    count, at, line_end = 0, 0, -1
    while (at := text.find("[", at)) >= 0:
        if line_end < at:
            line_end = text.find("\n", at)
            line_end = len(text) if line_end < 0 else line_end
        close = text.find("]", at + 1, line_end)
        if close < 0:  # no span starts on the rest of this line
            at = line_end + 1
            continue
        count += 1
        at = close + 1
    return count >= num_placeholders


def postscript(text: str, postscript_marker: str) -> bool:
    """The marker anywhere, in any case; `P.S.` and `P.P.S` also with a space after a dot (`p. s.`)."""
    pattern = _POSTSCRIPTS.get(postscript_marker) or _anywhere(postscript_marker)
    return pattern.search(text) is not None


def end_phrase(text: str, end_phrase: str) -> bool:
    """The answer ends with the phrase (any case, surrounding spaces ignored)."""
    return text.strip().lower().endswith(end_phrase.strip().lower())


def quotation(text: str) -> bool:
    """The whole answer is inside double quotation marks."""
    body = text.strip()
    return len(body) > 1 and body[0] == '"' and body[-1] == '"'


def no_comma(text: str) -> bool:
    return "," not in text

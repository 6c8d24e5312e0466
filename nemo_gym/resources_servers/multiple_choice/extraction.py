"""Which option an answer chose, read as a careful grader would, most explicit first:

    letter        the whole answer is the letter: "B", "(B)", "[b]", "**B**", "B.", "Option B"
    answer_line   an answer statement, the last one counts: "Answer: B", "The answer is (B)", "Final answer: B",
                  "the correct option is **B**", "I choose B", "I'd go with B", a correction ("... wait, B.")
    boxed         "\\boxed{B}", an answer statement too (the last of these and the answer lines counts)
    stated        only when there is no answer statement, the last of: "B is correct", "so B.", "it's B",
                  "not A but B", a bold letter ("I pick **D**"), an answer ending "... is B." or "... B."
    leading       the answer opens with the letter: "B) Rome", "B. Rome is the capital", "B\\n\\nbecause ..."
    verdicts      options weighed one by one ("A) ... incorrect", "B) ... correct"), exactly one found right
    option_text   the answer names exactly one option's text ("Paris", "It is Paris."), as a whole phrase

Options merely discussed ("Option A is wrong because ...") are never an answer. A letter counts only when the
question has that option; a statement naming several ("A or B", "A and C") chooses none, as does a negated one
("not A"). A lower-case letter counts where it cannot be a word: set apart ("(b)", "**b**"), after "option", or
closing its statement ("answer: b", "the answer is b."), so "the answer is a bit long" is not option A.
"""

import re
import string
from typing import Any

LETTER = "letter"
ANSWER_LINE = "answer_line"
BOXED = "boxed"
STATED = "stated"
LEADING = "leading"
VERDICTS = "verdicts"
OPTION_TEXT = "option_text"
NO_ANSWER = "none"

_AMBIGUOUS = "ambiguous"  # a statement naming several options: it chose none
# Characters: what governs a letter (a negation, an "if", the end of its sentence) is near it. Every look around a
# letter stops this far from it, so that many letters in a long answer are read in linear time.
_NEAR = 200
_BACK_TO_BACK_WORDS = 3  # at most this many words between two different answers: neither counts

# Markup around a letter: spaces, bold or italics, code, math, brackets, LaTeX's \text{...} and \boxed{...}.
# Possessive quantifiers (*+, ++) throughout: a run of spaces or asterisks is never re-read, so reading an answer
# takes time linear in its length, degenerate answers included.
_OPEN = r"(?:[\s*_`$(\[{]|\\(?:text|textbf|mathrm|mathbf|boxed)\s*+\{)*+"
_CLOSE = r"[\s*_`$)\]}]*+"
_TOKEN = re.compile(rf"{_OPEN}(?i:(?:option|choice|letter)\b\s*)?{_OPEN}([A-Za-z])(?![A-Za-z0-9'’])")
# What may follow a letter that ends its statement ("the answer is b." / "so B, since ...").
_ENDS = re.compile(r"[ \t*_`$)\]}]*+(?:[.,;:!?<—–\n]|-\s|\Z|(?<=\s)(?i:because|since|as)\b)")
_SET_APART = re.compile(r"[(\[{*`$]|(?i:option|choice|letter)\s*$")
_PRONOUN_I = re.compile(r"\s+[a-z]")
_ALSO = re.compile(rf"{_CLOSE}(?:,|/|&|\+|(?i:\bor\b|\band\b))\s*+")
# "B if there is friction, otherwise C" names two options.
_OTHERWISE = re.compile(r"(?i:\b(?:otherwise|or\s++else|else)\b),?\s*+(?i:it(?:'s|’s|\s++is)\s++)?")
_WHOLE_LETTER = re.compile(
    r"[\s*_`$]*+[(\[]?\s*+(?i:(?:option|choice|letter)\s*+)?[(\[]?\s*+([A-Za-z])\s*+[)\]]?[\s*_`$]*+[.:]?[\s*_`$]*+")

# Answer statements: each pattern ends where the answer starts.
_NOUN = (r"(?:answer|ans\b\.?)(?:\s++(?:choice|option|letter))?(?:\s++to\s++(?:this|the)\s++question)?"
         r"|(?:correct|right|best|final|my|only\s++correct|most\s++likely)\s++(?:option|choice|letter|response|pick)")
_VERB = (r"(?:is|would\s+be|should\s+be|will\s+be|must\s+be|has\s+to\s+be)(?:\s+(?:therefore|thus|clearly|definitely"
         r"|probably|likely))?\b[ \t]*:?|[:=\-–—→]|\n")
_STATEMENTS = [
    re.compile(rf"(?i:\b(?:{_NOUN})(?:\*\*|__)?[ \t]*(?:{_VERB}))"),
    # "Answer (B)" ending its line, "the answer (B) follows ...", "<answer>B</answer>"
    re.compile(r"(?i:\banswer(?=[ \t]*[(\[]?[A-Za-z][)\]]?[ \t]*$))", re.MULTILINE),
    re.compile(r"(?i:\b(?:the|my|final)\s+answer[ \t]*(?=[(\[][A-Za-z][)\]])|<answer>)"),
    re.compile(r"(?i:\bI(?:'d|’d|'ll|’ll|\s+would|\s+will)?\s+(?:choose|pick|select|go\s+(?:with|for)|opt\s+for|say"
               r"|answer|guess|lean\s+towards?)\s+|\bI(?:'m|’m|\s+am)\s+(?:going\s+with|choosing|picking)\s+)"
               r"|(?:^|(?<=[.!?])\s)(?i:choose|select|pick)\s+", re.MULTILINE),
]
# A correction, "... no wait, B." / "actually it's C.": read only as a letter that ends its sentence.
_CORRECTION = re.compile(r"(?i:\b(?:wait|actually|correction|on\s++second\s++thought|I\s++mean|just\s++kidding)\b"
                         r"[,:!]?\s*+(?:[—–-]\s*+)?(?:it(?:'s|’s|\s++is)\s++)?)")
_BOXED = re.compile(r"\\boxed\s*\{")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
_HYPOTHETICAL = re.compile(r"(?i:\b(?:if|whether|suppose|assuming|assume|unless)\b)")

# Weaker statements, read only when there is no answer statement.
_THEN_LETTER = re.compile(
    r"(?i:\b(?:so|thus|therefore|hence|then|(?:that|which)\s+leaves(?:\s+us\s+with)?|leaving)\b[,:]?\s*"
    r"(?:(?:it|that)(?:'s|’s|\s+is|\s+must\s+be)\s+)?"
    r"|\bit(?:'s|’s|\s+is|\s+must\s+be|\s+has\s+to\s+be|\s+should\s+be)\s+"
    r"|\bnot\s++(?:(?:option|choice)\s++)?[A-Za-z](?:\s*+,)?\s++but\s++(?:rather\s++)?)")
_LETTER_IS_RIGHT = re.compile(
    r"(?<![A-Za-z0-9'’])(?:\*\*|[(\[])?(?i:(?:option|choice)\s+)?(?:\*\*|[(\[])?([A-Za-z])(?:\*\*|[)\]])?"
    r"(?:\s*+\([^()\n]{0,20}\))?\s++"  # "option B (3) is right"
    r"(?i:(?:is|seems|appears|looks|stands\s+out\s+as)(?:\s+to\s+be)?"
    r"(?:\s+(?:definitely|clearly|certainly|indeed|probably|likely))?\s+(?:the\s+)?(?:only\s+|most\s+)?"
    r"(?:correct|right|best|better|true|answer|solution|accurate|appropriate|plausible)\b"
    r"(?!\s+(?:if|only|when|for|under|in\s+some)\b))"
    r"|(?i:\bonly\s+(?:(?:option|choice)\s+)?)([A-Z])\s+(?i:fits|works|matches|satisfies|remains)\b")
_BOLD_LETTER = re.compile(r"\*\*\s*+[(\[]?\s*+(?i:(?:option|choice)\s++)?([A-Za-z])\s*+[)\]]?\s*+[.:]?\s*+\*\*")
_LAST_LETTER = re.compile(
    r"(?:\A|[.!?:]\s++|\n\s*+|(?i:\b(?:hmm+|so|well|wait|ok|okay|then|thus|therefore|hence|no|yes|honestly"
    r"|definitely|clearly|probably|certainly|surely|choose|pick|guess|say)\b)[,:]?\s++"
    r"|(?i:\b(?:is|be|was|matches|matching|corresponds\s++to|corresponding\s++to|lies\s++in)\s++))"
    r"[(\[*`$]*+(?i:(?:option|choice)\s++)?[(\[*`$]*+([A-Za-z])[)\]*`$]*+\s*+[.!]?\s*+\Z")
_NEGATED = re.compile(r"(?i:\b(?:not|no|neither|nor|never|if|whether|unless|eliminate|exclude|except|rule\s+out)\b"
                      r"|n't|n’t)")
_NON_SPACE = re.compile(r"\S")
_SENTENCE_STOP = re.compile(r"\n|(?<=[.!?])\s")
_ALSO_BOLD = re.compile(r"\s*+(?:,|/|&|(?i:\bor\b|\band\b))\s*+\*\*")
_BOLD_BEFORE = re.compile(r"\*\*\s*+(?:,|/|&|(?i:\bor\b|\band\b))\s*+$")
_WRONG_AFTER = re.compile(r"(?i:\s+(?:is|are)\s+(?:not|wrong|incorrect|false)\b)")

# The answer's start, and options labelled one by one ("A) ...", "(B) ...", "C: ...", "Option D ...").
_LEADING = re.compile(r"[\s*_`$]*+[(\[]?\s*+(?i:(?:option|choice)\s++)?[(\[]?\s*+([A-Za-z])"
                      r"(?:[)\]]|[*_`$]*+[ \t]*+(?:[).:,\-–—\n]|\Z))")
_LABEL = re.compile(r"[ \t>#*_-]*+(?:\d+[.)]\s*+)?(?:[(\[]([A-Z])[)\]]|([A-Z])\**+\s*+[).:\-–—]"
                    r"|(?i:option|choice)\s++([A-Z])\b)")
_STRICT_LABEL = re.compile(r"(?:^|(?<=[.!?])(?=[ \t]))[ \t>#*_-]*+(?i:(?:option|choice)\s++)?[(\[]?([A-Z])"
                           r"(?:[)\]]|\**+[ \t]*+[).:\-–—])", re.MULTILINE)
_SEGMENT_BREAK = re.compile(r"\n|(?<=[.!?])\s++(?=[(\[*]*+(?:(?i:option|choice)\s++)?[A-Z][)\]*]*+\s*+[).:\-–—]|"
                            r"(?i:option|choice)\s++[A-Z]\b)")
_WORD = re.compile(r"[A-Za-z]+")
_RIGHT = {"correct", "right", "yes", "true"}
_NOT_BEFORE_RIGHT = {"not", "in", "never", "isn"}

_PUNCTUATION = str.maketrans({char: " " for char in string.punctuation})
_NEGATING_WORDS = {"not", "nor", "neither", "no", "never", "t"}  # "t" is what remains of "isn't"
_NEGATING_PAIRS = {("rather", "than"), ("instead", "of")}
_SHORT_ANSWER_WORDS = 8
_COMMON_WORDS = {"none", "above", "both", "with", "that", "this", "from", "than", "only", "they", "their", "there",
                 "which", "what", "when", "have", "does", "will", "would", "could", "should", "also", "into", "some",
                 "more", "most", "less", "each", "other", "these", "those", "answer", "option", "choice"}


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


def _affirmed(answer: str, phrase: str) -> bool:
    """Whether `phrase` occurs in `answer` (both normalized, padded with spaces) other than after "not", "nor"..."""
    start = answer.find(phrase)
    while start >= 0:
        before = answer[max(0, start - _NEAR):start].split()[-2:]
        if not (before and before[-1] in _NEGATING_WORDS) and tuple(before) not in _NEGATING_PAIRS:
            return True
        start = answer.find(phrase, start + 1)
    return False


def _named_option(text: str, options: dict[str, str]) -> str | None:
    """The one option whose text the answer names as a whole phrase (None for none or several); a short answer may
    name it by a word no other option has ("Shakespeare" for "William Shakespeare")."""
    answer = f" {_normalized(text)} "
    named = [letter for letter, option in options.items()
             if _normalized(option) and _affirmed(answer, f" {_normalized(option)} ")]
    if len(named) > 1:
        # "Paris" inside "Paris, Texas": a longer option that contains the others is the one named.
        longest = max(named, key=lambda letter: len(_normalized(options[letter])))
        inside = all(f" {_normalized(options[letter])} " in f" {_normalized(options[longest])} " for letter in named)
        return longest if inside else None
    if named or len(answer.split()) > _SHORT_ANSWER_WORDS:
        return named[0] if named else None
    words = {letter: set(_normalized(option).split()) for letter, option in options.items()}
    by_word = [letter for letter, own in words.items()
               if any(len(word) >= 4 and word not in _COMMON_WORDS and _affirmed(answer, f" {word} ")
                      and not any(word in other for other_letter, other in words.items() if other_letter != letter)
                      for word in own)]
    return by_word[0] if len(by_word) == 1 else None


def _letter_at(text: str, pos: int, end: int, ends: bool = False) -> tuple[str, int] | None:
    """The option letter written at `pos` (markup and "option" allowed before it) and where it ends, in text[:end];
    None where what is there is not a letter: a lower-case one neither set apart nor ending its statement ("a
    bit"), the pronoun "I". With `ends`, the letter must end its statement."""
    found = _TOKEN.match(text, pos, end)
    if found is None:
        return None
    letter, after = found.group(1), found.end()
    closes = _ENDS.match(text, after, end) is not None
    if ends and not closes:
        return None
    if letter.islower() and not closes and not _SET_APART.search(text, pos, found.start(1)):
        return None
    if letter == "I" and _PRONOUN_I.match(text, after, end):
        return None
    return letter.upper(), after


def _read(text: str, pos: int, end: int, options: dict[str, str], ends: bool = False) -> str | None:
    """The option an answer written in text[pos:end] names: a letter, else the one letter set apart in it ("Rome
    (B)"), else one option's text; _AMBIGUOUS for several, None for none."""
    token = _letter_at(text, pos, end, ends)
    if token is not None:
        letter, after = token
        if letter not in options:
            return None
        for also in (_ALSO.match(text, after, end), _OTHERWISE.search(text, after, end)):
            other = _letter_at(text, also.end(), end) if also is not None else None
            if other is not None and other[0] in options and other[0] != letter:
                return _AMBIGUOUS
        return letter
    if ends:
        return None
    span = text[pos:end]
    set_apart = {found.group(1).upper() for found in re.finditer(r"[(\[]([A-Za-z])[)\]]|\*\*([A-Za-z])\*\*", span)
                 if (found.group(1) or found.group(2)).upper() in options}
    if len(set_apart) > 1:
        return _AMBIGUOUS
    return set_apart.pop() if set_apart else _named_option(span, options)


def _sentence_end(text: str, pos: int) -> tuple[int, int]:
    """(start, end) of the sentence that starts at `pos` (spaces before it skipped), at most _NEAR characters."""
    start = _NON_SPACE.search(text, pos, pos + _NEAR)
    if start is None:
        return pos, pos
    reach = min(len(text), start.start() + _NEAR)
    stop = _SENTENCE_STOP.search(text, start.start(), reach)
    return start.start(), stop.start() if stop else reach


def _clause_before(text: str, pos: int, stops: str = ".!?\n") -> str:
    """What precedes `pos` in its sentence (or clause, with more `stops`), at most _NEAR characters."""
    floor = max(0, pos - _NEAR)
    start = max(text.rfind(stop, floor, pos) for stop in stops) + 1
    return text[max(start, floor):pos]


def _lists_options(text: str, pos: int) -> bool:
    """Whether a list of options labelled one per line starts at `pos` ("Answer:\\n(A) Paris\\n(B) Rome ...": the
    options echoed, not one chosen)."""
    label = _STRICT_LABEL.match(text, pos)
    if label is None:
        return False
    line_end = text.find("\n", pos, pos + _NEAR)
    following = _STRICT_LABEL.match(text, line_end + 1) if line_end >= 0 else None
    return following is not None and following.group(1) != label.group(1)


def _statements(text: str, options: dict[str, str]) -> list[tuple[int, str, str, bool]]:
    """(position, letter or _AMBIGUOUS, form, whether it corrects what came before) of every answer statement and
    \\boxed{}, in order."""
    found = []
    for pattern in _STATEMENTS:
        for cue in pattern.finditer(text):
            if _HYPOTHETICAL.search(_clause_before(text, cue.start())):
                continue
            start, end = _sentence_end(text, cue.end())
            if not _lists_options(text, start) and (read := _read(text, start, end, options)) is not None:
                found.append((start, read, ANSWER_LINE, False))
    for cue in _CORRECTION.finditer(text):
        if (read := _read(text, cue.end(), min(len(text), cue.end() + _NEAR), options, ends=True)) is not None:
            found.append((cue.end(), read, ANSWER_LINE, True))
    for cue in _BOXED.finditer(text):
        depth, end, limit = 1, cue.end(), min(len(text), cue.end() + _NEAR)
        while end < limit and depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        inside = _LATEX_TEXT.sub(r"\1", text[cue.end():end - 1] if depth == 0 else text[cue.end():end])
        if (read := _read(inside, 0, len(inside), options)) is not None:
            found.append((cue.start(), read, BOXED, False))
    return sorted(found)


def _negated(text: str, pos: int) -> bool:
    return _NEGATED.search(_clause_before(text, pos, ".!?;,:\n—–")) is not None


def _stated(text: str, options: dict[str, str]) -> list[tuple[int, str]]:
    """(position, letter or _AMBIGUOUS) of every weaker statement: see the module's docstring."""
    found = []
    for cue in _THEN_LETTER.finditer(text):
        if (read := _read(text, cue.end(), min(len(text), cue.end() + _NEAR), options, ends=True)) is not None:
            found.append((cue.end(), read))
    for verdict in _LETTER_IS_RIGHT.finditer(text):
        letter = (verdict.group(1) or verdict.group(2)).upper()
        if letter in options and not _negated(text, verdict.start()):
            found.append((verdict.start(), letter))
    for bold in _BOLD_LETTER.finditer(text):
        floor = max(0, bold.start() - _NEAR)
        before = text[floor:bold.start()]
        opens_line = ("\n" in before or floor == 0) and not before.rsplit("\n", 1)[-1].strip(" \t-*>#0123456789.")
        # "**A**: wrong because ..." opening a line is the heading of an option weighed, not an answer.
        heading = opens_line and text[bold.end():bold.end() + _NEAR].split("\n", 1)[0].strip(" \t.")
        several = _ALSO_BOLD.match(text, bold.end()) or _BOLD_BEFORE.search(text, max(0, bold.start() - 20),
                                                                             bold.start())
        letter = bold.group(1).upper()
        if letter in options and not (heading or several or _WRONG_AFTER.match(text, bold.end())
                                      or _negated(text, bold.start())):
            found.append((bold.start(), letter))
    end = len(text.rstrip())
    last = _LAST_LETTER.search(text, max(0, end - _NEAR), end)
    if last is not None and last.group(1).upper() in options and not _negated(text, last.start(1)):
        found.append((last.start(1), last.group(1).upper()))
    return found


def _leading(text: str, options: dict[str, str]) -> str | None:
    """The letter the answer opens with, unless the answer goes on to label other options the same way (a list of
    options weighed one by one, not an answer)."""
    read = _read(text, 0, len(text), options) if _LEADING.match(text) else None
    if read is None or read == _AMBIGUOUS:
        return None
    labels = {label.group(1) for label in _STRICT_LABEL.finditer(text) if label.group(1) in options}
    return read if labels <= {read} else None


def _verdicts(text: str, options: dict[str, str]) -> str | None:
    """The one option found right where options are weighed one by one, a segment each: "B) Rome - correct",
    "(D) Correct.", "C: right, it is bounded", "E: yes"."""
    right, weighed = set(), set()
    for segment in _SEGMENT_BREAK.split(text):
        label = _LABEL.match(segment)
        if label is None:
            continue
        letter = label.group(1) or label.group(2) or label.group(3)
        words = [word.lower() for word in _WORD.findall(segment[label.end():])]
        if letter not in options or not words:
            continue
        weighed.add(letter)
        if words[0] in _RIGHT or (words[-1] in _RIGHT and (len(words) < 2 or words[-2] not in _NOT_BEFORE_RIGHT)):
            right.add(letter)
    return right.pop() if len(right) == 1 and len(weighed) > 1 else None


def extract_choice(text: str, options: dict[str, str]) -> tuple[str | None, str]:
    """(chosen letter or None, the form it was read from) for the answer `text` to a question with `options`."""
    whole = _WHOLE_LETTER.fullmatch(text)
    if whole and whole.group(1).upper() in options:
        return whole.group(1).upper(), LETTER
    statements = _statements(text, options)
    if statements:
        position, read, form, corrects = statements[-1]
        if len(statements) > 1 and not corrects:
            before, earlier = statements[-2][:2]
            # Two different answers back to back ("Answer: B\nAnswer: C"), no reasoning between: neither is the one.
            if earlier != read and len(_WORD.findall(text, before, position)) <= _BACK_TO_BACK_WORDS:
                return None, NO_ANSWER
        return (None, NO_ANSWER) if read == _AMBIGUOUS else (read, form)
    stated = _stated(text, options)
    if stated:
        _, read = max(stated, key=lambda statement: statement[0])
        return (None, NO_ANSWER) if read == _AMBIGUOUS else (read, STATED)
    if (letter := _leading(text, options)) is not None:
        return letter, LEADING
    if (letter := _verdicts(text, options)) is not None:
        return letter, VERDICTS
    named = _named_option(text, options)
    return (named, OPTION_TEXT) if named is not None else (None, NO_ANSWER)

"""(instruction id, kwargs, response) triples for every instruction kind of instruction_following: responses written
to follow and to break each kind, near misses of its form (a marker a character off, another case, a space too
many), and adversarial ones given to every kind (empty, blank, a megabyte, unclosed markers, unicode case, nested
quotes, JSON inside code fences, trailing spaces). Drawn from a seeded generator: the same corpus every time.
"""

import json
import random
from dataclasses import dataclass
from typing import Any, Iterator

from nemo_gym.resources_servers.instruction_following.instructions import INSTRUCTIONS

SEED = 44
PER_KIND = 125  # drawn triples per kind, before the adversarial ones

SENTENCES = [
    "The river runs past the old mill.", "Music fills the city at night!", "Do you know the way to the garden?",
    "It's a well-known fact that bread tastes better warm.", "Dr. Smith arrived at 3.5 km from the coast.",
    "Our robot can't climb stairs yet.", "Winter came early this year... and stayed.", "The ocean was calm.",
    "My friend lives in the forest near the U.S. border.", "We bought 12 loaves of bread for the party.",
    "Nobody expected the snow in May.", "The river, the garden and the city all flooded.",
    "She said hello to everyone in the room.", "Is it raining again?", "What a wonderful day it was!",
]
UNICODE = ["straße ist lang", "ÉCOLE NORMALE", "İstanbul is big", "ﬁne print", "Ωmega and ωmega", "naïve café"]
WORDS = ["river", "garden", "music", "winter", "bread", "robot", "ocean", "forest", "city", "friend"]
MEGABYTE = "The river runs past the old mill. " * (2**20 // 34)


@dataclass(frozen=True)
class Triple:
    instruction_id: str
    kwargs: dict[str, Any]
    response: str
    origin: str  # "drawn" or the adversarial case's name

    def key(self) -> str:
        return f"{self.instruction_id} {json.dumps(self.kwargs, sort_keys=True)} {self.response[:200]!r}"


def _text(rng: random.Random, sentences: int | None = None) -> str:
    count = sentences if sentences is not None else rng.randint(1, 6)
    return " ".join(rng.choice(SENTENCES) for _ in range(count))


def _relation(rng: random.Random) -> str:
    return rng.choice(["less than", "at least"])


def _join_paragraphs(rng: random.Random, paragraphs: list[str]) -> str:
    divider = rng.choice(["\n***\n", "\n\n***\n\n", " *** ", "\n*** \n", "\n ***\n", "***"])
    return divider.join(paragraphs)


def _cased(rng: random.Random, text: str) -> str:
    return rng.choice([text, text.lower(), text.upper(), text.title(), text.lower().capitalize()])


def _marks(rng: random.Random, forms: list[str]) -> str:
    """Up to four marks, each one of `forms` filled with topic words."""
    return " ".join(rng.choice(forms).format(rng.choice(WORDS), rng.choice(WORDS)) for _ in range(rng.randint(0, 4)))


def _draw(instruction_id: str, rng: random.Random) -> tuple[dict[str, Any], str]:
    """One drawn triple's kwargs and response for `instruction_id`."""
    kind = instruction_id.split(":")[1]
    if kind == "number_words":
        return {"relation": _relation(rng), "num_words": rng.choice([5, 10, 20, 40])}, _text(rng)
    if kind == "number_sentences":
        return {"relation": _relation(rng), "num_sentences": rng.randint(1, 6)}, _text(rng)
    if kind == "number_paragraphs":
        count = rng.randint(1, 4)
        paragraphs = [_text(rng, rng.randint(1, 3)) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.15:
            paragraphs.insert(rng.randint(0, len(paragraphs)), rng.choice(["", " "]))
        return {"num_paragraphs": count}, _join_paragraphs(rng, paragraphs)
    if kind == "existence":
        keywords = rng.sample(WORDS, rng.randint(1, 3))
        return {"keywords": keywords}, _text(rng) + rng.choice(["", " The gardener smiled.", " RIVERS rise."])
    if kind == "forbidden_words":
        words = rng.sample(["the", "and", "river", "city", "bread", "is"], rng.randint(1, 2))
        return {"forbidden_words": words}, _text(rng) + rng.choice(["", " Theory and thesis.", " Cityscape."])
    if kind == "frequency":
        word = rng.choice(WORDS)
        extra = " ".join(_cased(rng, rng.choice([word, word + "s", "un" + word])) for _ in range(rng.randint(0, 4)))
        return {"keyword": word, "relation": _relation(rng), "frequency": rng.randint(1, 4)}, f"{_text(rng)} {extra}"
    if kind == "letter_frequency":
        letter = rng.choice("aeiourstlnqz")
        return ({"letter": letter, "let_relation": _relation(rng), "let_frequency": rng.randint(1, 30)},
                _cased(rng, _text(rng)))
    if kind == "english_lowercase":
        return {}, rng.choice([_text(rng).lower(), _text(rng), _text(rng).lower() + " OK", "12 34 56",
                               rng.choice(UNICODE).lower(), "le chat est sur la table et il dort bien"])
    if kind == "english_capital":
        return {}, rng.choice([_text(rng).upper(), _text(rng), _text(rng).upper() + " ok", "12 34 56",
                               rng.choice(UNICODE).upper(), "LE CHAT EST SUR LA TABLE ET IL DORT BIEN"])
    if kind == "capital_word_frequency":
        shouted = " ".join(rng.choice(["NOW", "VERY", "I", "A", "OK", "U.S.", "DON'T"]) for _ in range(rng.randint(0, 5)))
        return ({"capital_relation": _relation(rng), "capital_frequency": rng.randint(1, 4)},
                f"{_text(rng)} {shouted}")
    if kind == "json_format":
        value = rng.choice(['{"a": 1}', '[1, 2, 3]', '"text"', '{"nested": {"list": [true, null]}}', "{a: 1}",
                            '{"a": 1', "42", 'null'])
        fence = rng.choice(["{}", "```json\n{}\n```", "```JSON\n{}\n```", "```\n{}\n```", "```Json\n{}\n```",
                            "Here it is: {}", "{}\nDone.", "  {}  ", "```json {}```"])
        return {}, fence.format(value) if "{}" in fence else value
    if kind == "number_bullet_lists":
        items = [rng.choice(["* ", "- ", "*", "** ", "1. ", "  * ", "• "]) + rng.choice(WORDS)
                 for _ in range(rng.randint(0, 5))]
        return {"num_bullets": rng.randint(1, 4)}, "\n".join([_text(rng, 1), *items])
    if kind == "title":
        return {}, rng.choice(["<<{}>> ", "<< {} >>\n", "<{}> ", "<<{}\n>> ", "<<>> ", "<<{}", "{} >>",
                               "<<<{}>>> ", "« {} » "]).format(rng.choice(WORDS)) + _text(rng)
    if kind == "number_highlighted_sections":
        marks = _marks(rng, ["*{}*", "**{}**", "* {} *", "*{}", "**", "*{} and {}*"])
        return {"num_highlights": rng.randint(1, 3)}, _text(rng) + " " + marks
    if kind == "multiple_sections":
        splitter = rng.choice(["Section", "SECTION", "Part"])
        heads = [rng.choice(["{} {}", "{} {}:", "## {} {}", "{}{}", "{} {}.", "**{} {}**"]).format(
            rng.choice([splitter, splitter.lower()]), number) for number in range(1, rng.randint(1, 5))]
        body = "\n".join(f"{head}\n{_text(rng, 1)}" for head in heads)
        return {"section_spliter": splitter, "num_sections": rng.randint(1, 4)}, body or _text(rng)
    if kind == "number_placeholders":
        marks = _marks(rng, ["[{}]", "[ ]", "[]", "[{}", "[{} {}]", "[[{}]]"])
        return {"num_placeholders": rng.randint(1, 3)}, _text(rng) + " " + marks
    if kind == "postscript":
        marker = rng.choice(["P.S.", "P.P.S"])
        ending = rng.choice(["\n{} Thanks!", "\n{}", "\n{}Thanks", "\n  {} see you", "\n{} ", "\nPS see you",
                             " {} inline", "\np.s. lower", "\nP.S.: colon"]).format(marker)
        return {"postscript_marker": marker}, _text(rng) + ending
    if kind == "end_checker":
        phrase = rng.choice(["Is there anything else I can help with?", "That is all.", "Thank you for reading."])
        ending = rng.choice([phrase, phrase + "   ", phrase.lower(), phrase + "!", phrase[:-1], "", phrase + "\n"])
        return {"end_phrase": phrase}, f"{_text(rng)} {ending}"
    if kind == "quotation":
        return {}, rng.choice(['"{}"', "'{}'", '"{}', '  "{}"  ', '"{}" and more', '“{}”', '"He said "{}""',
                               '""']).format(_text(rng))
    if kind == "no_comma":
        return {}, _text(rng) + rng.choice(["", ", then", "，", " 1,000"])
    raise ValueError(f"no drawing rule for {instruction_id}")


def _adversarial(instruction_id: str, kwargs: dict[str, Any]) -> Iterator[Triple]:
    cases: dict[str, str] = {
        "empty": "",
        "blank": " \n\t ",
        "megabyte": MEGABYTE,
        "unclosed markers": "<<title without end *highlight without end [placeholder without end ```json {\"a\": 1}",
        "unicode case": " ".join(UNICODE),
        "nested quotes": '"She said "don\'t" and "no, never""',
        "json in a code fence": '```json\n{"answer": "yes", "quote": "a \\"b\\""}\n```',
        "trailing spaces": "The river runs past the old mill.   \n   ",
    }
    for name, response in cases.items():
        yield Triple(instruction_id, kwargs, response, name)


def corpus(seed: int = SEED, per_kind: int = PER_KIND) -> list[Triple]:
    """Every kind's drawn triples and its adversarial ones, without repeats."""
    rng = random.Random(seed)
    out: dict[str, Triple] = {}
    for instruction_id in INSTRUCTIONS:
        first: dict[str, Any] | None = None
        for _ in range(per_kind):
            kwargs, response = _draw(instruction_id, rng)
            first = first if first is not None else kwargs
            triple = Triple(instruction_id, kwargs, response, "drawn")
            out.setdefault(triple.key(), triple)
        assert first is not None
        for triple in _adversarial(instruction_id, first):
            out.setdefault(triple.key(), triple)
    return list(out.values())



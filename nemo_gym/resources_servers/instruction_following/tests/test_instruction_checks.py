"""Every kind of instruction, checked on an answer that follows it and on one that does not, and on a megabyte of
degenerate text within a tenth of a second of CPU."""

import signal
from contextlib import contextmanager
from typing import Iterator

import pytest

from nemo_gym.resources_servers.instruction_following.app import follow_instructions
from nemo_gym.resources_servers.instruction_following.instructions import INSTRUCTIONS

# id -> (kwargs, an answer that follows it, one that does not)
CASES = {
    "length_constraints:number_words": ({"relation": "less than", "num_words": 5}, "Four words are here.",
                                        "Here are five whole words."),
    "length_constraints:number_sentences": ({"relation": "at least", "num_sentences": 2}, "One. Two!",
                                            "Only one sentence, 3.5 long."),
    "length_constraints:number_paragraphs": ({"num_paragraphs": 2}, "First part.\n***\nSecond part.",
                                             "First part.\n***\n\n***\nSecond part."),
    "keywords:existence": ({"keywords": ["river", "bread"]}, "Bread by the Rivers.", "Bread by the lake."),
    "keywords:forbidden_words": ({"forbidden_words": ["very"]}, "Every day is fine.", "It is Very fine."),
    "keywords:frequency": ({"keyword": "sun", "relation": "at least", "frequency": 2}, "One sun and a sunset.",
                           "One sun and a moon."),
    "keywords:letter_frequency": ({"letter": "z", "let_relation": "less than", "let_frequency": 2}, "A zoo.",
                                  "Zig zag."),
    "change_case:english_lowercase": ({}, "all quiet here, 42.", "all quiet here, Sir."),
    "change_case:english_capital": ({}, "ALL LOUD HERE, 42!", "ALL LOUD HERe"),
    "change_case:capital_word_frequency": ({"capital_relation": "at least", "capital_frequency": 2},
                                           "I SAW TWO birds.", "I saw A bird, NOT two."),
    "detectable_format:json_format": ({}, '```json\n{"a": [1, 2]}\n```', 'Here: {"a": 1}'),
    "detectable_format:number_bullet_lists": ({"num_bullets": 2}, "Items:\n* one\n- two\n", "* one\n* two\n* three"),
    "detectable_format:title": ({}, "<<A Day Out>>\nWe went out.", "<< >> We went out."),
    "detectable_format:number_highlighted_sections": ({"num_highlights": 2}, "This *matters* and **this**.",
                                                      "Only *one* here, ** is empty."),
    "detectable_format:multiple_sections": ({"section_spliter": "Section", "num_sections": 2},
                                            "Section 1\nHello.\nSection2\nBye.", "SECTION 1\nHello.\nSection two."),
    "detectable_content:number_placeholders": ({"num_placeholders": 2}, "Dear [name], see [ ].",
                                               "Dear [name], see [you\n]."),
    "detectable_content:postscript": ({"postscript_marker": "P.S."}, "Bye. p. s. see you", "Bye. PS see you"),
    "startend:end_checker": ({"end_phrase": "That is all."}, "Done. That is ALL.  ", "That is all. Really."),
    "startend:quotation": ({}, '  "Wrapped whole."\n', '"Wrapped" not whole.'),
    "punctuation:no_comma": ({}, "No commas here.", "One, two."),
}


def test_every_kind_has_cases() -> None:
    assert sorted(CASES) == sorted(INSTRUCTIONS) and len(INSTRUCTIONS) >= 15


@pytest.mark.parametrize("instruction_id", sorted(CASES))
def test_an_answer_that_follows_passes(instruction_id: str) -> None:
    kwargs, follows, _ = CASES[instruction_id]
    assert INSTRUCTIONS[instruction_id].check(follows, **kwargs) is True


@pytest.mark.parametrize("instruction_id", sorted(CASES))
def test_an_answer_that_does_not_fails(instruction_id: str) -> None:
    kwargs, _, breaks = CASES[instruction_id]
    assert INSTRUCTIONS[instruction_id].check(breaks, **kwargs) is False


@pytest.mark.parametrize("instruction_id", sorted(CASES))
def test_each_kind_says_its_parameters_to_the_model(instruction_id: str) -> None:
    kwargs, _, _ = CASES[instruction_id]
    sentence = INSTRUCTIONS[instruction_id].say(**kwargs)
    assert sentence and all(str(value if not isinstance(value, list) else value[0]) in sentence
                            for name, value in kwargs.items() if not name.endswith("relation"))


SEGMENT = 70_000
# About 1 MB in which every span opener is left open and runs of one character are long: each pattern that could
# re-read a run from every position meets one here.
DEGENERATE = "".join([
    "```json" + " " * SEGMENT, "<<" + "t" * SEGMENT, "*" + "h" * SEGMENT, "[" + "p" * SEGMENT, "." * SEGMENT + "x",
    " " * SEGMENT + "\n", "\n" * SEGMENT, "<" * SEGMENT, "*" * SEGMENT, "[" * SEGMENT, "a-" * (SEGMENT // 2),
    "***" + " " * SEGMENT + "x\n", "-" + " " * SEGMENT + "\n", "#" * SEGMENT + " Section x\n",
    "P.S." + " " * SEGMENT + "\n",
])
CPU_BUDGET_S = 0.1  # each kind takes at most about 30 ms here; a quadratic pattern takes minutes


@contextmanager
def cpu_budget(seconds: float) -> Iterator[None]:
    """Fail the block once it has used `seconds` of this process's CPU time (SIGPROF; the regex engine stops for
    signals), so a pattern that would run for hours fails within the budget instead."""

    def over(signum: int, frame: object) -> None:
        raise AssertionError(f"over its budget of {seconds} s of CPU")

    previous = signal.signal(signal.SIGPROF, over)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_the_degenerate_answer_is_a_megabyte() -> None:
    assert len(DEGENERATE.encode()) >= 1_000_000


@pytest.mark.parametrize("instruction_id", sorted(CASES))
def test_a_megabyte_of_degenerate_text_is_verified_within_a_tenth_of_a_second(instruction_id: str) -> None:
    kwargs, _, _ = CASES[instruction_id]
    with cpu_budget(CPU_BUDGET_S):
        follow_instructions(DEGENERATE, [instruction_id], [kwargs])

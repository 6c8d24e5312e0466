"""Which option an answer chose: every form the extraction reads, answers that choose nothing, agreement with the
hand-labelled corpus, and time linear in the answer's length."""

import time

import pytest

from nemo_gym.resources_servers.multiple_choice.corpus import agreement, load_corpus
from nemo_gym.resources_servers.multiple_choice.extraction import (
    ANSWER_LINE, BOXED, LEADING, LETTER, NO_ANSWER, OPTION_TEXT, STATED, VERDICTS, OptionsError, extract_choice,
    option_texts,
)

OPTIONS = {"A": "Paris", "B": "Rome", "C": "Paris, Texas", "D": "12"}
LETTERS_ONLY = {letter: "" for letter in "ABCD"}


@pytest.mark.parametrize("text, chosen, form", [
    ("B", "B", LETTER), ("(B)", "B", LETTER), ("[b]", "B", LETTER), ("**B**", "B", LETTER), (" B. ", "B", LETTER),
    ("Option B", "B", LETTER),
    ("Answer: B", "B", ANSWER_LINE), ("The answer is (B)", "B", ANSWER_LINE), ("answer: b", "B", ANSWER_LINE),
    ("The correct option is: **B**", "B", ANSWER_LINE), ("A or B? Answer: C", "C", ANSWER_LINE),
    ("Answer: A. On second thought, answer: B", "B", ANSWER_LINE),  # the last statement counts
    ("Final answer: B", "B", ANSWER_LINE), ("I'd go with B.", "B", ANSWER_LINE),
    ("The answer is A... no wait, B.", "B", ANSWER_LINE),  # a correction right after the statement it corrects
    ("So \\boxed{B}", "B", BOXED), ("\\boxed{(d)}", "D", BOXED), ("\\boxed{\\text{Rome}}", "B", BOXED),
    ("A is wrong and C is wrong. B is correct.", "B", STATED), ("It's not A, it's B.", "B", STATED),
    ("Not A but B.", "B", STATED), ("Of the four, **B** fits best.", "B", STATED),
    ("B) Rome", "B", LEADING), ("B. Rome is the capital.", "B", LEADING),
    ("A) Paris - incorrect\nB) Rome - correct\nC) Paris, Texas - incorrect", "B", VERDICTS),
    ("Rome", "B", OPTION_TEXT), ("It is Rome.", "B", OPTION_TEXT), ("12", "D", OPTION_TEXT),
    ("Paris, Texas", "C", OPTION_TEXT),  # the longer option that contains "Paris"
    ("Neither Paris nor Paris, Texas; it is Rome.", "B", OPTION_TEXT),  # options named after "not" are not chosen
])
def test_each_usual_form_is_read(text: str, chosen: str, form: str) -> None:
    assert extract_choice(text, OPTIONS) == (chosen, form)


@pytest.mark.parametrize("text", [
    "", "I think", "the answer is a bit long",  # "a" is an article, not option A
    "Paris or Rome", "A or B", "The answer is A or B.", "Answer: A, C",  # several options: no choice
    "Not A.", "The answer is not C.",  # negated
    "112", "Answer: E", "E",  # no such option
    "Answer:\n(A) Paris\n(B) Rome\n(C) Paris, Texas\n(D) 12",  # the options echoed
    "Answer: B\nAnswer: C",  # two answers back to back
    "A) Paris is in France.\nB) Rome is in Italy.",  # options discussed, none chosen
])
def test_answers_that_choose_nothing(text: str) -> None:
    assert extract_choice(text, OPTIONS) == (None, NO_ANSWER)


@pytest.mark.parametrize("text", [
    "The answer is B. Option A is wrong because Paris is in France.",
    "Answer: B\n\nChoice C is tempting but wrong.",
])
def test_options_discussed_after_the_answer_do_not_replace_it(text: str) -> None:
    assert extract_choice(text, LETTERS_ONLY) == ("B", ANSWER_LINE)


def test_the_hand_labelled_corpus_is_read_as_a_grader_reads_it() -> None:
    answers = load_corpus()
    assert len(answers) >= 300 and {answer.kind for answer in answers} >= {
        "options_discussed_after", "negation", "several_letters", "either_or", "boxed", "bold", "parenthesised",
        "lower_case", "option_text_only", "answer_at_start", "final_answer_line", "chain_of_thought"}
    measured = agreement(answers)
    assert measured["agreement"] >= 0.99, measured["disagreements"]
    # Where it misses, it reads no choice: never one the answer did not make.
    assert measured["read_as_another_letter"] == 0, measured["disagreements"]


@pytest.mark.parametrize("text", [
    "\n" * 100_000, " " * 100_000, "** " * 30_000, "Answer:" + " " * 100_000 + "x", "not A" + " " * 100_000 + "x",
    "the " * 25_000, "answer: B " * 10_000, "so B " * 20_000, "A) x\n" * 20_000, "Paris " * 15_000,
])
def test_reading_takes_time_linear_in_the_answer(text: str) -> None:
    # About 0.05 s of CPU each; a pattern that re-reads a run of spaces from every position takes minutes.
    started = time.process_time()
    extract_choice(text, OPTIONS)
    assert time.process_time() - started < 2.0


def test_options_are_nemo_gyms_list_of_one_entry_objects() -> None:
    assert option_texts([{"A": "x"}, {"B": "y"}]) == {"A": "x", "B": "y"}
    for bad in ([], {"A": "x"}, [{"A": "x", "B": "y"}], [{"a": "x"}], [{"A": 1}], [{"A": "x"}, {"A": "y"}]):
        with pytest.raises(OptionsError):
            option_texts(bad)

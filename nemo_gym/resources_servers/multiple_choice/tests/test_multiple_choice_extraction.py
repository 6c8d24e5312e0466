"""Which option an answer chose: every form the extraction reads, and answers that choose nothing."""

import pytest

from nemo_gym.resources_servers.multiple_choice.extraction import (
    ANSWER_LINE, BOXED, LEADING, LETTER, NO_ANSWER, OPTION_TEXT, OptionsError, extract_choice, option_texts,
)

OPTIONS = {"A": "Paris", "B": "Rome", "C": "Paris, Texas", "D": "12"}


@pytest.mark.parametrize("text, chosen, form", [
    ("B", "B", LETTER), ("(B)", "B", LETTER), ("[b]", "B", LETTER), ("**B**", "B", LETTER), (" B. ", "B", LETTER),
    ("Answer: B", "B", ANSWER_LINE), ("The answer is (B)", "B", ANSWER_LINE),
    ("The correct option is: **B**", "B", ANSWER_LINE), ("A or B? Answer: C", "C", ANSWER_LINE),
    ("Answer: A. On second thought, answer: B", "B", ANSWER_LINE),  # the last statement counts
    ("So \\boxed{B}", "B", BOXED), ("\\boxed{(d)}", "D", BOXED),
    ("B) Rome", "B", LEADING), ("B. Rome is the capital.", "B", LEADING),
    ("Rome", "B", OPTION_TEXT), ("It is Rome.", "B", OPTION_TEXT), ("12", "D", OPTION_TEXT),
    ("Paris, Texas", "C", OPTION_TEXT),  # the longer option that contains "Paris"
])
def test_each_usual_form_is_read(text: str, chosen: str, form: str) -> None:
    assert extract_choice(text, OPTIONS) == (chosen, form)


@pytest.mark.parametrize("text", [
    "", "I think", "the answer is a bit long",  # "a" is an article, not option A
    "Paris or Rome",  # two options named: no choice
    "112", "Answer: E", "E",  # no such option
    "answer: b",  # a statement needs the capital letter
])
def test_answers_that_choose_nothing(text: str) -> None:
    assert extract_choice(text, OPTIONS) == (None, NO_ANSWER)


def test_options_are_nemo_gyms_list_of_one_entry_objects() -> None:
    assert option_texts([{"A": "x"}, {"B": "y"}]) == {"A": "x", "B": "y"}
    for bad in ([], {"A": "x"}, [{"A": "x", "B": "y"}], [{"a": "x"}], [{"A": 1}], [{"A": "x"}, {"A": "y"}]):
        with pytest.raises(OptionsError):
            option_texts(bad)

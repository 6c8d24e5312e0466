"""The strict verdict rule and the checks on a configured prompt template and labels."""

import pytest

from nemo_gym.resources_servers.judge.verdict import MODES, check_labels, check_template, parse_verdict

POSITIVE, NEGATIVE = MODES["equivalence"].positive, MODES["equivalence"].negative


@pytest.mark.parametrize("text, verdict", [
    ("[[A=B]]", True), ("Both say 180, so [[A=B]].", True), ("They differ: [[A!=B]]", False),
    ("", None), ("They are the same.", None), ("[[A=B]] or [[A!=B]]", None),  # no label, both labels
    ("[[A=B]] ... [[A=B]]", None), ("[[a=b]]", None), ("[[A = B]]", None),  # twice, other case, other spelling
])
def test_a_verdict_is_exactly_one_label_once(text: str, verdict: bool | None) -> None:
    assert parse_verdict(text, POSITIVE, NEGATIVE) is verdict


def test_the_default_templates_use_what_their_mode_requires() -> None:
    for mode, defaults in MODES.items():
        check_template(mode, defaults.template)
        check_labels(defaults.positive, defaults.negative)


@pytest.mark.parametrize("mode, template, complaint", [
    ("equivalence", "{first_answer} vs ...", "must use ['second_answer']"),
    ("equivalence", "{first_answer} {second_answer} {answer}", "uses ['answer']"),
    ("correctness", "{question}", "must use ['answer']"),
    ("correctness", "{answer!r}", "plain {name}"),
    ("correctness", "{answer:>10}", "plain {name}"),
])
def test_a_template_that_cannot_be_filled_is_refused(mode: str, template: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        check_template(mode, template)


def test_literal_braces_are_allowed_and_labels_must_be_distinct() -> None:
    check_template("correctness", 'Reply as JSON {{"verdict": ...}} about {answer}.')
    for positive, negative in (("", "no"), ("YES", "YES!"), ("[[X]]", "[[X]]")):
        with pytest.raises(ValueError):
            check_labels(positive, negative)

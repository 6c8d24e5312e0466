"""The math environment in-process: answer extraction and matching, the verifier, the arithmetic generator."""

import orjson
import pytest

from nemo_gym.resources_servers.math import app as math_app, verifier
from nemo_gym.resources_servers.math.generate_arithmetic import generate_rows, main as generate_main
from tests.helpers.responses import function_call, message, response


# ---- math ----


@pytest.mark.parametrize(
    "text, expected",
    [
        ("So the total is \\boxed{68}.", "68"),
        ("First \\boxed{3}, corrected: \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("23 + 45 = 68", "68"),
        ("It costs 1,250 dollars, or -3.5 per day.", "-3.5"),
        ("\\boxed{12 unclosed, so the last number: 7", "7"),
        ("I do not know.", None),
        ("", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert verifier.extract_answer(text) == expected


@pytest.mark.parametrize(
    "predicted, expected, match",
    [("68", "68", True), ("0.5", "1/2", True), ("\\frac{1}{2}", "0.5", True), ("1,000", "1000", True),
     ("67", "68", False), ("-68", "68", False)],
)
def test_answers_match(predicted: str, expected: str, match: bool) -> None:
    assert verifier.answers_match(predicted, expected) is match


def test_answers_match_falls_back_to_numbers_when_math_verify_cannot_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verifier, "parse", lambda text: [])
    assert verifier.answers_match("1,000.0", "1000")
    assert not verifier.answers_match("999", "1000")
    assert not verifier.answers_match("x", "1000")


def test_final_message_text_uses_the_last_message_only() -> None:
    reply = response(message("draft: 12"), function_call('{"city": "Paris"}'), message("final: \\boxed{13}"))
    assert math_app.final_message_text(reply) == "final: \\boxed{13}"
    assert verifier.extract_answer(math_app.final_message_text(reply)) == "13"
    assert math_app.final_message_text(response(function_call("{}"))) == ""


# ---- arithmetic generator ----


def test_generator_is_deterministic_per_seed_and_correct(tmp_path) -> None:
    rows = generate_rows(20, seed=0, digits=2)
    assert rows == generate_rows(20, seed=0, digits=2) and rows != generate_rows(20, seed=1, digits=2)
    for row in rows:
        prompt = row["responses_create_params"]["input"][0]["content"]
        a, b = (int(n) for n in prompt.removeprefix("What is ").split("?")[0].split(" + "))
        assert 10 <= a <= 99 and 10 <= b <= 99 and row["expected_answer"] == str(a + b)
    out = tmp_path / "sub" / "rows.jsonl"
    generate_main(["--n", "20", "--seed", "0", "--digits", "2", "--out", str(out)])
    assert [orjson.loads(line) for line in out.read_bytes().splitlines()] == rows
    single = generate_rows(30, seed=3)
    assert all(int(r["expected_answer"]) <= 18 for r in single)


def test_shipped_arithmetic_example_is_seed_0() -> None:
    shipped = math_app.__file__.replace("app.py", "data/arithmetic_example.jsonl")
    with open(shipped, "rb") as f:
        assert [orjson.loads(line) for line in f] == generate_rows(50, seed=0)

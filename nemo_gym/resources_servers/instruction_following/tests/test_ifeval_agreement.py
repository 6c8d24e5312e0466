"""The environment's verdicts against IFEval's own checkers (lm-eval's ifeval task, a test dependency) over the
corpus of benchmarks/ifeval/corpus.py: every comparable kind agrees on every triple (docs/environments.md,
"instruction_following"); with `check_english` off, the two case kinds differ only where langdetect reads the text
as another language."""

from benchmarks.ifeval.agreement import measure
from benchmarks.ifeval.corpus import corpus
from benchmarks.ifeval.reference import NEEDS_PUNKT
from nemo_gym.resources_servers.instruction_following.instructions import INSTRUCTIONS


def test_every_comparable_kind_agrees_with_ifeval_on_the_whole_corpus() -> None:
    triples = corpus()
    assert len(triples) >= 2000
    kinds, _ = measure(triples)
    assert set(kinds) == set(INSTRUCTIONS) - NEEDS_PUNKT
    assert {name: kind.disagreements for name, kind in kinds.items() if kind.disagreements} == {}


def test_without_the_english_check_the_case_kinds_differ_only_on_what_langdetect_reads_as_another_language() -> None:
    from nemo_gym.resources_servers.instruction_following.app import ENGLISH_KINDS, follow_instructions
    from nemo_gym.resources_servers.instruction_following.checks import english

    differ = []
    for triple in corpus():
        if triple.instruction_id in ENGLISH_KINDS:
            with_check = follow_instructions(triple.response, [triple.instruction_id], [{}])[0][1]
            without = follow_instructions(triple.response, [triple.instruction_id], [{}], check_english=False)[0][1]
            if with_check != without:
                differ.append(triple.response)
    assert differ and all(not english(text) for text in differ)  # "DO YOU KNOW THE WAY TO THE GARDEN?" among them


def test_the_corpus_breaks_and_follows_every_kind_and_holds_the_adversarial_cases() -> None:
    triples = corpus()
    origins = {triple.origin for triple in triples}
    assert {"empty", "blank", "megabyte", "unclosed markers", "unicode case", "nested quotes",
            "json in a code fence", "trailing spaces"} <= origins
    for instruction_id, instruction in INSTRUCTIONS.items():
        verdicts = {instruction.check(t.response, **t.kwargs) for t in triples
                    if t.instruction_id == instruction_id and t.origin == "drawn"}
        assert verdicts == {True, False}, instruction_id

"""The environment's verdicts against IFEval's own checkers (lm-eval's ifeval task, a test dependency) over the
corpus of benchmarks/ifeval/corpus.py: every comparable kind agrees on every triple, but where IFEval's language
detector decides a case kind (docs/environments.md, "instruction_following")."""

from benchmarks.ifeval.agreement import measure
from benchmarks.ifeval.corpus import corpus
from benchmarks.ifeval.reference import NEEDS_PUNKT
from nemo_gym.resources_servers.instruction_following.instructions import INSTRUCTIONS


def test_every_comparable_kind_agrees_with_ifeval_on_the_whole_corpus() -> None:
    triples = corpus()
    assert len(triples) >= 2000
    kinds, _ = measure(triples)
    assert set(kinds) == set(INSTRUCTIONS) - NEEDS_PUNKT
    assert {name: kind.unexplained for name, kind in kinds.items() if kind.unexplained} == {}
    # The language detector's verdicts are the only difference, and they are few.
    assert all(kind.agreed / kind.compared >= (0.85 if kind.explained else 1.0) for kind in kinds.values())


def test_the_corpus_breaks_and_follows_every_kind_and_holds_the_adversarial_cases() -> None:
    triples = corpus()
    origins = {triple.origin for triple in triples}
    assert {"empty", "blank", "megabyte", "unclosed markers", "unicode case", "nested quotes",
            "json in a code fence", "trailing spaces"} <= origins
    for instruction_id, instruction in INSTRUCTIONS.items():
        verdicts = {instruction.check(t.response, **t.kwargs) for t in triples
                    if t.instruction_id == instruction_id and t.origin == "drawn"}
        assert verdicts == {True, False}, instruction_id

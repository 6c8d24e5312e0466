"""instruction_following's verdicts against IFEval's reference checkers (benchmarks/ifeval/reference.py) over the
corpus (benchmarks/ifeval/corpus.py), kind by kind: what the agreement benchmark records and the environment's test
asserts.

Two kinds are not compared (`NEEDS_PUNKT`). A disagreement is listed with its triple.
"""

import contextlib
import io
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from benchmarks.ifeval.corpus import Triple, corpus
from benchmarks.ifeval.reference import NEEDS_PUNKT, reference_follows
from nemo_gym.resources_servers.instruction_following.app import follow_instructions


@dataclass
class KindAgreement:
    compared: int = 0
    agreed: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"compared": self.compared, "agreed": self.agreed, "agreement": round(self.agreed / self.compared, 4),
                "disagreements": self.disagreements}


def measure(triples: list[Triple] | None = None) -> tuple[dict[str, KindAgreement], dict[str, Any]]:
    """Per comparable kind, its agreement; and the corpus's size, origins and the time each side took."""
    triples = corpus() if triples is None else triples
    kinds: dict[str, KindAgreement] = {}
    seconds = Counter[str]()
    for triple in triples:
        if triple.instruction_id in NEEDS_PUNKT:
            continue
        started = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            reference = reference_follows(triple.instruction_id, triple.kwargs, triple.response)
        seconds["reference"] += time.process_time() - started
        started = time.process_time()
        ours = follow_instructions(triple.response, [triple.instruction_id], [triple.kwargs])[0][1]
        seconds["ours"] += time.process_time() - started
        kind = kinds.setdefault(triple.instruction_id, KindAgreement())
        kind.compared += 1
        if reference == ours:
            kind.agreed += 1
        else:
            kind.disagreements.append({"kwargs": triple.kwargs, "response": triple.response[:300],
                                     "origin": triple.origin, "reference": reference, "ours": ours})
    about = {"triples": len(triples), "origins": dict(Counter(t.origin for t in triples)),
             "not_compared": {kind: "its IFEval check needs NLTK's punkt models, which no PyPI package ships"
                              for kind in sorted(NEEDS_PUNKT)},
             "cpu_s": {side: round(value, 2) for side, value in seconds.items()}}
    return kinds, about

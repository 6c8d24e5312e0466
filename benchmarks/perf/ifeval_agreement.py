"""instruction_following against IFEval's own checkers (lm-eval's ifeval task): the agreement per instruction kind
over a corpus of 2,000 and more (instruction, kwargs, response) triples (benchmarks/ifeval/). Writes
benchmarks/results/ifeval_agreement.json.

    .venv/bin/python -m benchmarks.perf.ifeval_agreement

Needs lm-eval, langdetect, immutabledict and nltk (scripts/setup_tests.sh installs them).
"""

import argparse

from benchmarks.ifeval.agreement import measure
from benchmarks.perf.results import recording


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the same run (it takes seconds), under quick/")
    args = parser.parse_args()
    with recording("ifeval_agreement", args.quick) as recorder:
        kinds, about = measure()
        for name, kind in kinds.items():
            print(f"{kind.agreed / kind.compared:7.2%}  {kind.agreed:>4}/{kind.compared:<4}  {name}", flush=True)
        compared = sum(kind.compared for kind in kinds.values())
        ratios = {
            "agreement_overall": round(sum(kind.agreed for kind in kinds.values()) / compared, 4),
            "agreement_lowest_kind": round(min(kind.agreed / kind.compared for kind in kinds.values()), 4),
            "disagreements": sum(len(kind.disagreements) for kind in kinds.values()),
        }
        recorder.write(ratios, {"settings": {**about, "reference": "lm-eval's lm_eval/tasks/ifeval checkers, strict"},
                                "kinds": {name: kind.to_dict() for name, kind in sorted(kinds.items())}})


if __name__ == "__main__":
    main()

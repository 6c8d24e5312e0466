"""Multiple-choice answer extraction against the hand-labelled corpus: how often it reads what a careful grader reads.

    .venv/bin/python -m benchmarks.perf.multiple_choice_extraction

Reads every answer of nemo_gym/resources_servers/multiple_choice/data/answer_corpus.jsonl with `extract_choice` and
compares it with the answer's label (corpus.py says how the labels were written). Records the agreement overall and
per kind, how the disagreements split (a letter other than the label, or none where the grader reads one), each
disagreement, and the CPU time per answer. Writes benchmarks/results/multiple_choice_extraction.json.
"""

import argparse
import time

from benchmarks.perf.results import recording
from nemo_gym.resources_servers.multiple_choice.corpus import agreement, load_corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="write to benchmarks/results/quick/")
    args = parser.parse_args()
    with recording("multiple_choice_extraction", args.quick) as recorder:
        answers = load_corpus()
        started = time.process_time()
        measured = agreement(answers)
        cpu_s = time.process_time() - started
        print(f"{measured['agree']}/{measured['answers']} agree ({measured['agreement']:.2%}); "
              f"{measured['read_as_another_letter']} read as another letter, {measured['read_as_none']} as none",
              flush=True)
        recorder.write({"agreement": measured["agreement"]},
                       {**measured, "cpu_ms_per_answer": round(cpu_s * 1000 / len(answers), 3)})


if __name__ == "__main__":
    main()

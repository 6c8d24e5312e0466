"""IFEval's reference checkers (lm-eval's ifeval task) and a corpus of (instruction, kwargs, response) triples: what
instruction_following's verdicts are measured against (benchmarks/perf/ifeval_agreement.py and the environment's
agreement test)."""

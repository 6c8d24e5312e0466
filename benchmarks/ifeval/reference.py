"""IFEval's own checkers, as lm-eval ships them (`lm_eval/tasks/ifeval/`, PyPI `lm-eval`, installed without its
dependencies by scripts/setup_tests.sh: these three modules need only nltk, langdetect and immutabledict).

They are loaded without `lm_eval.tasks`' package module, which would import the whole harness (datasets, torch,
...). Their import asks NLTK for its `punkt_tab` data and downloads it when missing; that download is refused here
(nothing leaves this machine), so the two kinds whose checks need punkt (number_sentences: NLTK's sentence
tokenizer; capital_word_frequency: its word tokenizer) cannot be compared: `NEEDS_PUNKT`. langdetect is seeded, as
its answer is random otherwise.
"""

import importlib
import sys
import types
from pathlib import Path
from typing import Any

NEEDS_PUNKT = frozenset({"length_constraints:number_sentences", "change_case:capital_word_frequency"})


def _instruction_classes() -> dict[str, Any]:
    import langdetect
    import lm_eval
    import nltk

    langdetect.DetectorFactory.seed = 0
    tasks = Path(lm_eval.__file__).parent / "tasks"
    for name, folder in (("lm_eval.tasks", tasks), ("lm_eval.tasks.ifeval", tasks / "ifeval")):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package
    download, nltk.download = nltk.download, lambda *args, **kwargs: False
    try:
        registry = importlib.import_module("lm_eval.tasks.ifeval.instructions_registry")
    finally:
        nltk.download = download
    return dict(registry.INSTRUCTION_DICT)


_CLASSES: dict[str, Any] | None = None


def reference_follows(instruction_id: str, kwargs: dict[str, Any], response: str) -> bool:
    """IFEval's strict verdict: the response is not blank and the instruction's checker, built from `kwargs`,
    follows it (lm-eval's `test_instruction_following_strict`)."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _instruction_classes()
    checker = _CLASSES[instruction_id](instruction_id)
    checker.build_description(**{name: value for name, value in kwargs.items() if value is not None})
    return bool(response.strip()) and bool(checker.check_following(response))

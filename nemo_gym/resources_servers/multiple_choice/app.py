"""Reward 1.0 when the option the final message chose is the row's `expected_answer` (a letter), else 0.0.

Rows carry NeMo Gym's `options` (a list of one-entry objects, [{"A": "Paris"}, {"B": "Rome"}, ...]) and the letter
of the right one in `expected_answer`. The choice is read by `extraction.py` as a careful grader reads it (an
explicit answer statement such as "Answer: B" or \\boxed{B} over options merely discussed; an answer that names no
single option chooses none); `verify` adds `extracted_answer` (the letter, or null) and `answer_form`.

Metrics per option position show position bias: `expected_answer_<L>/mean_reward` (accuracy when the right option is
<L>) and `chosen_<L>/rate` (how often <L> was chosen; `chosen_none/rate` for no choice). A model without bias chooses
each position about as often as it is right.
"""

from collections import Counter
from typing import Any

from nemo_gym.metrics.accumulator import EXTRACTED_ANSWER
from nemo_gym.protocol import final_message_text
from nemo_gym.resources_servers.base import ResourcesServer
from nemo_gym.resources_servers.metrics import mean_reward_by
from nemo_gym.resources_servers.multiple_choice.extraction import OptionsError, extract_choice, option_texts
from nemo_gym.server.base import HandlerError

EXPECTED = "expected_answer"
CHOSEN = "chosen"
NONE = "none"


def chosen_rates(rows: list[dict[str, Any]]) -> dict[str, float]:
    """`chosen_<letter>/rate` (and `chosen_none/rate`) over the rows that were scored."""
    scored = [row for row in rows if isinstance(row.get("reward"), (int, float))]
    counts = Counter(row.get(EXTRACTED_ANSWER) or NONE for row in scored)
    return {f"{CHOSEN}_{choice}/rate": count / len(scored) for choice, count in sorted(counts.items())}


class MultipleChoiceResourcesServer(ResourcesServer):
    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        try:
            options = option_texts(row.get("options"))
        except OptionsError as exc:
            raise HandlerError(400, f"the row's {exc}") from None
        expected = row.get(EXPECTED)
        if expected not in options:
            raise HandlerError(400, f"the row's '{EXPECTED}' must be one of its option letters "
                                    f"({', '.join(options)}), got {expected!r}")
        chosen, form = extract_choice(final_message_text(response), options)
        return {EXTRACTED_ANSWER: chosen, "answer_form": form, "reward": 1.0 if chosen == expected else 0.0}

    def compute_metrics(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Accuracy by the right option's position and the share of each chosen position (the library has the
        rest)."""
        return {**mean_reward_by(rows, EXPECTED), **chosen_rates(rows)}

    def key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        by_position = {key: value for key, value in agent_metrics.items()
                       if key.startswith(f"{CHOSEN}_") or (key.startswith(f"{EXPECTED}_") and key.endswith("/mean_reward"))}
        return {**super().key_metrics(agent_metrics), **by_position}

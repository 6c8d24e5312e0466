"""One line of the rollout table: the row's columns from the index plus short excerpts read from the row itself."""

import math
from typing import Any

from nemo_gym.viewer.index import RunIndex
from nemo_gym.viewer.row_fields import answer_text, extracted_answer, prompt_text

EXCERPT_CHARS = 160


def excerpt(text: str, chars: int = EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[:chars - 1] + "…"


def row_summary(index: RunIndex, position: int) -> dict[str, Any]:
    """JSON-ready summary of the row at `position`: keys, agent, reward (None when failed or unscored), failure
    class, tokens and cost in USD (None when unknown), bytes, tool calls, prompt and answer excerpts."""
    cols = {name: index.rows.value(name, position) for name in (
        "task", "rollout", "reward", "input_tokens", "output_tokens", "length", "agent", "failure", "tool_calls",
        "cost_usd")}
    row = index.row(position)
    failure = index.failure_classes[int(cols["failure"])]
    reward, cost = float(cols["reward"]), float(cols["cost_usd"])
    return {
        "run": index.label, "position": position, "task": int(cols["task"]), "rollout": int(cols["rollout"]),
        "agent": index.agents[int(cols["agent"])], "reward": None if math.isnan(reward) else reward,
        "failure_class": failure or None,
        "input_tokens": None if cols["input_tokens"] < 0 else int(cols["input_tokens"]),
        "output_tokens": None if cols["output_tokens"] < 0 else int(cols["output_tokens"]),
        "cost_usd": None if math.isnan(cost) else cost,
        "bytes": int(cols["length"]), "tool_calls": int(cols["tool_calls"]),
        "prompt": excerpt(prompt_text(row)),
        "answer": excerpt(str(row.get("last_error") or "")) if failure else excerpt(answer_text(row)),
        "extracted_answer": None if failure else extracted_answer(row),
    }

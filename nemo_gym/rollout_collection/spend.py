"""The money of one collection run's output: each rollout priced as it is written, the totals (earlier runs' rollouts
in the output included, so a resumed run counts what its output cost), and the `+max_cost_usd` budget.

Prices come from `nemo_gym.pricing` (the one rule); this module adds them up. The budget is a start check of the
runner (`Runner.start_checks`): a rollout starts only while what the output cost so far, plus the rollouts in flight
and this one at the mean cost of a priced rollout, stays within the budget. Before the first priced rollout there is
no mean, so the first ones start on trust (up to the concurrency level).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson

from nemo_gym.model_calls import ModelCall, calls_of
from nemo_gym.pricing import PriceTable, format_usd, rollout_cost
from nemo_gym.run_files.rows import iter_lines
from nemo_gym.run_format import AGENT_REF, MODEL_CALLS

BUDGET_CHECK = "budget"  # its name among the runner's start checks
_COST_FIELD = b'"cost_usd":'  # a line without it has no recorded cost: not parsed


@dataclass
class _Total:
    usd: float = 0.0
    rollouts: int = 0  # rollouts with a cost


class Spend:
    """What the output's rollouts cost, in total and per agent; `price` is the runner's row preparer."""

    def __init__(self, table: PriceTable, budget_usd: float | None, in_flight: Callable[[], int]) -> None:
        """`in_flight`: the rollouts started and not yet finished (the runner's counters)."""
        self.table = table
        self.budget_usd = budget_usd
        self.in_flight = in_flight
        self.total = _Total()  # the whole output
        self.this_run = _Total()
        self.agents: dict[str, _Total] = {}  # the whole output, per agent

    def _add(self, agent: str, usd: float | None) -> None:
        if usd is None:
            return
        for total in (self.total, self.agents.setdefault(agent, _Total())):
            total.usd += usd
            total.rollouts += 1

    def add_earlier(self, output: Path) -> None:
        """Count the recorded costs of the rollouts already in `output` (a resumed run)."""
        for _, _, line in iter_lines(output, missing_ok=True):
            if _COST_FIELD in line:
                row = orjson.loads(line)
                self._add(row[AGENT_REF]["name"], rollout_cost(calls_of(row)))

    def price(self, row: dict[str, Any]) -> None:
        """Record each model call's cost in `row` (None where the table has no price) before the row is written."""
        listed = row.get(MODEL_CALLS)
        calls = []
        for record in listed if isinstance(listed, list) else []:
            call = ModelCall.from_dict(record)
            if call is not None:
                call.cost_usd = record["cost_usd"] = self.table.cost(call)
                calls.append(call)
        usd = rollout_cost(calls)
        self._add(row[AGENT_REF]["name"], usd)
        if usd is not None:
            self.this_run.usd += usd
            self.this_run.rollouts += 1

    @property
    def mean_usd(self) -> float | None:
        """The mean cost of a priced rollout of the output; None before the first."""
        return self.total.usd / self.total.rollouts if self.total.rollouts else None

    def check_budget(self) -> str | None:
        """The runner's start check: why no more rollouts may start, or None while the budget allows one more."""
        mean = self.mean_usd
        if self.budget_usd is None or mean is None:
            return None
        projected = self.total.usd + (self.in_flight() + 1) * mean
        if projected <= self.budget_usd:
            return None
        return (f"the budget +max_cost_usd={self.budget_usd:g} would be passed: {format_usd(self.total.usd)} spent "
                f"on {self.total.rollouts} rollouts of this output, {self.in_flight()} more in flight at about "
                f"{format_usd(mean)} each; raise +max_cost_usd to go on")

    def snapshot(self) -> dict[str, Any]:
        """The progress file's `cost` (USD; None where nothing was priced)."""
        return {"total_usd": self.total.usd if self.total.rollouts else None,
                "this_run_usd": self.this_run.usd if self.this_run.rollouts else None,
                "priced_rollouts": self.total.rollouts,
                "mean_rollout_usd": self.mean_usd,
                "budget_usd": self.budget_usd,
                "agents": {agent: total.usd for agent, total in sorted(self.agents.items())}}

    def summary_line(self) -> str | None:
        """'cost: ...' for the end-of-run summary, or None when no rollout of the output was priced."""
        if not self.total.rollouts:
            return None
        agents = ", ".join(f"{agent} {format_usd(total.usd)}" for agent, total in sorted(self.agents.items()))
        budget = f"; budget {format_usd(self.budget_usd)}" if self.budget_usd is not None else ""
        return (f"cost: {format_usd(self.total.usd)} for the {self.total.rollouts} priced rollouts of the output "
                f"({format_usd(self.this_run.usd)} this run; mean {format_usd(self.mean_usd)} per rollout; "
                f"{agents}){budget}")

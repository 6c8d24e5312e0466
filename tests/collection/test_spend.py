"""The run's money (rollout_collection/spend.py): each call priced into its row before the row is written, the
totals across a resume, the budget check's projection, and the metrics adding up the same recorded costs."""

from pathlib import Path
from typing import Any

import orjson
import pytest

from nemo_gym.metrics.call_metrics import COST_METRIC, CallAccumulator
from nemo_gym.pricing import Price, PriceTable
from nemo_gym.rollout_collection.spend import Spend

TABLE = PriceTable({"priced": Price(input=1.0, cached_input=0.5, output=2.0)})
CALL_USD = (600 * 1.0 + 400 * 0.5 + 100 * 2.0) / 1e6  # 1000 input tokens (400 cached), 100 output: $0.001


def _row(agent: str, *models: str, task: int = 0) -> dict[str, Any]:
    calls = [{"endpoint": "http://127.0.0.1:1/v1", "model": model, "started_at": 1.0, "latency_s": 0.1,
              "input_tokens": 1000, "output_tokens": 100, "cached_tokens": 400} for model in models]
    return {"_ng_task_index": task, "_ng_rollout_index": 0, "agent_ref": {"name": agent}, "reward": 1.0,
            "_ng_model_calls": calls}


def test_each_call_gets_its_cost_and_the_totals_add_up_per_agent() -> None:
    spend = Spend(TABLE, None, lambda: 0)
    row = _row("a", "priced", "unknown", "priced")
    spend.price(row)
    assert [call["cost_usd"] for call in row["_ng_model_calls"]] == [pytest.approx(CALL_USD), None,
                                                                       pytest.approx(CALL_USD)]
    unpriced = _row("b", "unknown")
    spend.price(unpriced)
    assert unpriced["_ng_model_calls"][0]["cost_usd"] is None
    snapshot = spend.snapshot()
    assert snapshot["total_usd"] == pytest.approx(2 * CALL_USD) and snapshot["priced_rollouts"] == 1
    assert snapshot["agents"] == {"a": pytest.approx(2 * CALL_USD)}  # b priced nothing: no cost, not 0
    assert spend.summary_line() == "cost: $0.002 for the 1 priced rollouts of the output ($0.002 this run; mean " \
                                   "$0.002 per rollout; a $0.002)"


def test_nothing_priced_is_no_cost() -> None:
    spend = Spend(TABLE, None, lambda: 0)
    spend.price(_row("a", "unknown"))
    assert spend.snapshot()["total_usd"] is None and spend.summary_line() is None


def test_a_resume_counts_the_recorded_costs_of_the_output(tmp_path: Path) -> None:
    first = Spend(TABLE, None, lambda: 0)
    output = tmp_path / "out.jsonl"
    with open(output, "wb") as out:
        for task in range(3):
            row = _row("a", "priced", task=task)
            first.price(row)
            out.write(orjson.dumps(row) + b"\n")
        out.write(orjson.dumps(_row("a", task=3)) + b"\n")  # written before pricing: no cost recorded
    resumed = Spend(PriceTable({}), None, lambda: 0)  # earlier rows keep the price they were written with
    resumed.add_earlier(output)
    assert (resumed.total.usd, resumed.total.rollouts) == (pytest.approx(3 * CALL_USD), 3)
    assert resumed.snapshot()["this_run_usd"] is None


def test_the_budget_stops_starting_before_the_projection_passes_it() -> None:
    in_flight = 0
    spend = Spend(TABLE, 0.0055, lambda: in_flight)
    assert spend.check_budget() is None  # no rollout priced yet: no mean to project with
    for task in range(3):
        spend.price(_row("a", "priced", task=task))  # $0.003 spent, $0.001 a rollout
    in_flight = 1
    assert spend.check_budget() is None  # 0.003 + 2 * 0.001 = 0.005 <= 0.0055
    in_flight = 2
    reason = spend.check_budget()  # 0.003 + 3 * 0.001 = 0.006 > 0.0055
    assert reason == ("the budget +max_cost_usd=0.0055 would be passed: $0.003 spent on 3 rollouts of this output, "
                      "2 more in flight at about $0.001 each; raise +max_cost_usd to go on")
    assert Spend(TABLE, None, lambda: 1000).check_budget() is None  # no budget


def test_the_metrics_add_up_the_same_recorded_costs() -> None:
    spend = Spend(TABLE, None, lambda: 0)
    calls = CallAccumulator()
    for task, models in enumerate((("priced",), ("priced", "priced"), ("unknown",))):
        row = _row("a", *models, task=task)
        spend.price(row)
        calls.add(orjson.loads(orjson.dumps(row)))  # as read back from the file
    metrics = calls.metrics()
    assert metrics[COST_METRIC] == pytest.approx(spend.total.usd) == pytest.approx(3 * CALL_USD)
    assert metrics[f"{COST_METRIC}_per_rollout"] == pytest.approx(1.5 * CALL_USD)  # over the 2 priced rollouts
    assert calls.table()[0]["cost_usd"] == pytest.approx(3 * CALL_USD)

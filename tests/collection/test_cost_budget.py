"""Cost and budget end to end, over real servers on loopback: ng_collect_rollouts -> simple_agent -> vllm_model ->
a hosted stub whose every answer reports the same usage (prompt cache included), priced by the user's table at
$0.001 a call, one call a rollout.

A run with +max_cost_usd stops starting rollouts before the projected cost passes the budget and drains; its spend is
within one rollout's cost of the budget, and the summary, the progress file and the viewer show the same total. A
resume with a higher budget counts the earlier spend, finishes every rollout exactly once (the stub served one call
per rollout: none ran twice), and then the metrics file shows that same total too.
"""

import re
from pathlib import Path
from typing import Iterator

import httpx
import orjson
import pytest
import yaml

from benchmarks.perf.harness import write_rows
from nemo_gym.exit_status import EXIT_RETRY_LATER
from nemo_gym.metrics.call_metrics import COST_METRIC
from nemo_gym.run_files.metrics_file import read_metrics
from nemo_gym.viewer.index import open_run
from nemo_gym.viewer.summary import row_summary
from tests.collection.util import keys, read_rows, run_cli, sidecar
from tests.helpers.stack import Stack, environment_config, free_port, running_stack

PRICED_CHAT = Path(__file__).parent / "apps" / "priced_chat.py"
AGENT = "example_single_tool_call_simple_agent"
MODEL = "priced-stub"
# 600 uncached input tokens at $1/M, 400 cached at $0.5/M, 100 output at $2/M.
ROLLOUT_USD = (600 * 1.0 + 400 * 0.5 + 100 * 2.0) / 1e6
ROWS, PARALLEL, BUDGET_USD = 20, 4, 0.0055


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("cost_stack")
    port = free_port()
    tree = {"priced_chat": {"responses_api_models": {"priced_chat": {"entrypoint": str(PRICED_CHAT), "port": port,
                                                                     "model": MODEL}}},
            "policy_model": {"responses_api_models": {"vllm_model": {
                "base_url": f"http://127.0.0.1:{port}/v1", "api_key": "none", "model": MODEL}}}}
    (workdir / "model.yaml").write_text(yaml.safe_dump(tree))
    configs = f"{environment_config('example_single_tool_call')},{workdir / 'model.yaml'}"
    with running_stack([f"+config_paths=[{configs}]"], cwd=workdir) as running:
        yield running


def _collect(stack: Stack, tmp_path: Path, *extra: str) -> tuple[int, str]:
    prices = tmp_path / "prices.yaml"
    prices.write_text(yaml.safe_dump({"models": {MODEL: {"input": 1.0, "cached_input": 0.5, "output": 2.0}}}))
    result = run_cli("collect", [
        f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
        f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}",
        f"+prices_fpath={prices}", f"+num_samples_in_parallel={PARALLEL}", *extra], tmp_path, timeout=300)
    return result.returncode, result.stdout + result.stderr


def _cost_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("cost: "))


def _viewer(output: Path, cache: Path) -> tuple[list[float | None], float | None]:
    """The viewer's cost of each rollout and its total for the run."""
    index = open_run(str(output), "a", cache)
    per_rollout = [row_summary(index, position)["cost_usd"] for position in range(index.meta["rows"])]
    return per_rollout, index.overview()["cost_usd"]


def _completions(stack: Stack) -> int:
    url = stack.url("priced_chat")
    return httpx.get(f"{url}/stats", trust_env=False, timeout=10).json()["completions"]


def test_the_budget_stops_the_run_and_a_resume_with_more_finishes_it(stack: Stack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", ROWS, max_output_tokens=16)
    output = tmp_path / "out.jsonl"
    served_before = _completions(stack)

    status, said = _collect(stack, tmp_path, f"+max_cost_usd={BUDGET_USD}")
    assert status == EXIT_RETRY_LATER, said
    rows = read_rows(output)
    spent = sum(call["cost_usd"] for row in rows for call in row["_ng_model_calls"])
    assert all(call["cost_usd"] == pytest.approx(ROLLOUT_USD) for row in rows for call in row["_ng_model_calls"])
    assert BUDGET_USD - ROLLOUT_USD < spent <= BUDGET_USD, (spent, said)  # within one rollout's cost, never past
    assert len(rows) < ROWS
    # The reason names the budget and the spend when it was given (those in flight then finished after it).
    assert re.search(rf"stopped starting rollouts: the budget \+max_cost_usd={BUDGET_USD:g} would be passed: "
                     rf"\$[0-9.]+ spent on \d+ rollouts of this output, \d+ more in flight at about "
                     rf"\${ROLLOUT_USD:.4g} each; raise \+max_cost_usd to go on; .*\+resume_from_cache=true", said)
    assert _cost_line(said).startswith(f"cost: ${spent:.4g} for the {len(rows)} priced rollouts of the output")
    progress = orjson.loads(sidecar(output, "_progress.json").read_bytes())
    assert progress["state"] == "stopped"
    assert progress["cost"]["total_usd"] == pytest.approx(spent) and progress["cost"]["budget_usd"] == BUDGET_USD
    per_rollout, total = _viewer(output, tmp_path / "viewer_stopped")
    assert per_rollout == [pytest.approx(ROLLOUT_USD)] * len(rows) and total == pytest.approx(spent)

    status, said = _collect(stack, tmp_path, "+max_cost_usd=1", "+resume_from_cache=true")
    assert status == 0, said
    found = keys(output)
    assert len(found) == len(set(found)) == ROWS  # none lost, none twice
    assert set(keys(tmp_path / "out_materialized_inputs.jsonl")) == set(found)
    assert _completions(stack) - served_before == ROWS  # no rollout ran (and billed) twice
    total_usd = ROWS * ROLLOUT_USD
    this_run = (ROWS - len(rows)) * ROLLOUT_USD
    assert _cost_line(said) == (f"cost: ${total_usd:.4g} for the {ROWS} priced rollouts of the output "
                                f"(${this_run:.4g} this run; mean ${ROLLOUT_USD:.4g} per rollout; {AGENT} "
                                f"${total_usd:.4g}); budget $1.00")
    assert f"cost of the rollouts: ${total_usd:.4g}" in said  # the metrics' headline, over the whole output
    progress = orjson.loads(sidecar(output, "_progress.json").read_bytes())
    assert (progress["state"], progress["cost"]["total_usd"]) == ("finished", pytest.approx(total_usd))
    assert progress["cost"]["this_run_usd"] == pytest.approx(this_run)
    metrics = read_metrics(sidecar(output, "_aggregate_metrics.json"))
    assert sum(entry["agent_metrics"][COST_METRIC] for entry in metrics) == pytest.approx(total_usd)
    assert metrics[0]["agent_metrics"][f"{COST_METRIC}_per_rollout"] == pytest.approx(ROLLOUT_USD)
    per_rollout, total = _viewer(output, tmp_path / "viewer_finished")
    assert per_rollout == [pytest.approx(ROLLOUT_USD)] * ROWS and total == pytest.approx(total_usd)


def test_a_malformed_price_table_is_refused_before_anything_is_written(stack: Stack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", 2, max_output_tokens=16)
    bad = tmp_path / "bad_prices.yaml"
    bad.write_text(yaml.safe_dump({"models": {MODEL: {"input": 1.0, "output": "free"}}}))
    result = run_cli("collect", [
        f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
        f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={tmp_path / 'out' / 'out.jsonl'}",
        f"+prices_fpath={bad}"], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"price table {bad}: model '{MODEL}', field 'output': must be a non-negative number" in result.stderr
    assert not (tmp_path / "out").exists()

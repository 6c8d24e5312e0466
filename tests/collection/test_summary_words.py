"""The collector's last lines say plainly what happened: how many rollouts this run collected, what the output holds
when that is not everything, and where the rollouts, metrics and HTML report are."""

from pathlib import Path

import pytest

from nemo_gym.rollout_collection.collect import CollectionSummary, done_line
from tests.collection.conftest import CollectionStack
from tests.collection.util import run_cli, write_rows


def _summary(total: int, already: int, succeeded: int, failed: int) -> CollectionSummary:
    return CollectionSummary(Path("o.jsonl"), Path("o_failures.jsonl"), total=total, already_done=already,
                             succeeded=succeeded, failed=failed, elapsed_s=2.0, rollouts_per_s=1.0, mean_reward=0.5)


@pytest.mark.parametrize("counts, tail", [
    ((50, 0, 50, 0), ""),
    ((2, 0, 0, 2), "; the output holds 0 of this run's 2 rollouts; 2 failed"),
    ((50, 38, 12, 0), "; 38 were already in the output; the output holds 50 of this run's 50 rollouts"),
    ((50, 38, 10, 2), "; 38 were already in the output; the output holds 48 of this run's 50 rollouts; 2 failed"),
])
def test_the_done_line_says_what_the_output_holds(counts: tuple[int, int, int, int], tail: str) -> None:
    total, already, succeeded, failed = counts
    assert done_line(_summary(total, already, succeeded, failed)) == (
        f"done: {succeeded} rollouts collected in 2.0 s (1.0/s, mean reward 0.5000){tail}")


def test_the_summary_names_the_report_it_wrote(collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", 3)
    out = tmp_path / "out.jsonl"
    result = run_cli("collect", collection_stack.args("+agent_name=agent_a", f"+input_jsonl_fpath={tmp_path}/in.jsonl",
                                                      f"+output_jsonl_fpath={out}"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = tmp_path / "out_report.html"
    assert f"\nreport: {report}\n" in result.stdout and report.is_file()
    assert "done: 3 rollouts collected in " in result.stdout and "in this run" not in result.stdout

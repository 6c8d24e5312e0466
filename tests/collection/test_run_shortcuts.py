"""+dry_run, +sample/+sample_seed, the token summary and the collector's own log, through ng_collect_rollouts
against the folder's real subprocess agent servers."""

import random
from pathlib import Path

import orjson

from tests.collection.conftest import CollectionStack
from tests.collection.util import read_rows, run_cli, sidecar, write_rows


def _collect(stack: CollectionStack, tmp_path: Path, *args: str):
    return run_cli("collect", stack.args(*args), tmp_path)


def test_dry_run_validates_plans_and_writes_nothing(collection_stack: CollectionStack, tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", 6)
    out = tmp_path / "o" / "r.jsonl"
    base = ("+agent_name=agent_a", f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={out}", "+num_repeats=2")
    before = sorted(tmp_path.rglob("*"))
    result = _collect(collection_stack, tmp_path, *base, "+dry_run=true")
    assert result.returncode == 0, result.stderr
    assert "planned rollouts: 12 (shard 0 of 1; 256 in parallel) by agent: agent_a: 12" in result.stdout
    assert f"output: {out} (new)" in result.stdout and '"num_repeats":2' in result.stdout
    assert sorted(tmp_path.rglob("*")) == before  # not even the output folder

    rows = read_rows(inputs)
    rows[4]["responses_create_params"] = {"input": 7}
    inputs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    bad = _collect(collection_stack, tmp_path, *base, "+dry_run=true")
    assert bad.returncode == 2 and "in.jsonl:5: responses_create_params.input" in bad.stderr
    assert sorted(tmp_path.rglob("*")) == before

    write_rows(inputs, 6)
    assert _collect(collection_stack, tmp_path, *base).returncode == 0
    changed = _collect(collection_stack, tmp_path, *base[:3], "+num_repeats=3", "+resume_from_cache=true",
                       "+dry_run=true")
    assert changed.returncode == 2
    assert "refusing to resume" in changed.stderr and "num_repeats: 2 -> 3" in changed.stderr
    same = _collect(collection_stack, tmp_path, *base, "+resume_from_cache=true", "+dry_run=true")
    assert same.returncode == 0 and "(resumed (same run))" in same.stdout


def test_sample_is_a_reproducible_random_subset_recorded_in_the_manifest(collection_stack: CollectionStack,
                                                                         tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", 40)
    chosen = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        out = tmp_path / name / "r.jsonl"
        result = _collect(collection_stack, tmp_path, "+agent_name=agent_a", f"+input_jsonl_fpath={inputs}",
                          f"+output_jsonl_fpath={out}", "+sample=5", f"+sample_seed={seed}", "+limit=30")
        assert result.returncode == 0, result.stderr
        chosen[name] = sorted(r["q"] for r in read_rows(out))
        fp = orjson.loads(sidecar(out, "_manifest.json").read_bytes())["fingerprint"]
        assert (fp["sample"], fp["sample_seed"], fp["limit"]) == (5, seed, 30)
    # Positions drawn from the first 30 rows (limit) with a generator seeded by sample_seed alone.
    assert chosen["a"] == chosen["b"] == sorted(random.Random(7).sample(range(30), 5))
    assert chosen["c"] == sorted(random.Random(8).sample(range(30), 5)) != chosen["a"]

    resumed = _collect(collection_stack, tmp_path, "+agent_name=agent_a", f"+input_jsonl_fpath={inputs}",
                       f"+output_jsonl_fpath={tmp_path / 'a' / 'r.jsonl'}", "+sample=5", "+sample_seed=8",
                       "+limit=30", "+resume_from_cache=true")
    assert resumed.returncode == 2 and "sample_seed: 7 -> 8" in resumed.stderr


def test_summary_gives_tokens_and_the_log_sits_next_to_the_output(collection_stack: CollectionStack,
                                                                  tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", 4)
    out = tmp_path / "r.jsonl"
    result = _collect(collection_stack, tmp_path, "+agent_name=usage_agent", f"+input_jsonl_fpath={inputs}",
                      f"+output_jsonl_fpath={out}", "+num_repeats=2")
    assert result.returncode == 0, result.stderr
    # 8 rollouts, 10 input tokens each; output 1 + task index: 2 * (1 + 2 + 3 + 4) = 20.
    line = next(x for x in result.stdout.splitlines() if x.startswith("tokens: "))
    assert line.startswith("tokens: input 80 (mean 10.0 per rollout), output 20 (mean 2.5); ")
    assert line.endswith(" total tokens/s over 8 rollouts") and "output tokens/s" in line
    log = sidecar(out, "_collect.log").read_text()
    assert log.startswith("=== ") and "collecting 8 of 8 rollouts" in log and line in log
    assert "[collect] 8/8 rollouts (100.0%)" in log  # the progress lines (standard error) too

"""A re-verification resumed any number of times carries each failure of the run it re-verifies into its failures
file once. The resumes are of runs stopped (cancelled, as Ctrl-C does) while a verification is being answered,
after the carried records were written and before the end, whose compaction would hide a duplicate."""

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from nemo_gym.rollout_collection.config import RolloutReverificationConfig
from nemo_gym.rollout_collection.reverify import reverify_rollouts
from nemo_gym.run_files.paths import RunPaths
from tests.collection.inprocess_stack import AGENT, RESPONSE, InProcessStack, verified

CARRIED, VERIFIED = (0, 1), (2, 3)  # tasks that failed before verification, and tasks with a rollout
RESUMES = 3


def _key(task: int) -> dict[str, Any]:
    return {"_ng_task_index": task, "_ng_rollout_index": 0, "agent_ref": {"name": AGENT}}


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))


def _finished_run(folder: Path) -> Path:
    folder.mkdir()
    source = RunPaths(folder / "rollouts.jsonl")
    _write(source.materialized_inputs, [{**_key(task), "responses_create_params": {"input": f"q{task}"}}
                                        for task in CARRIED + VERIFIED])
    _write(Path(source.rollouts), [{**_key(task), "response": RESPONSE, "reward": 0.0} for task in VERIFIED])
    _write(source.failures, [{**_key(task), "failure_class": "timeout", "attempts": 3} for task in CARRIED])
    return Path(source.rollouts)


def _keys(path: Path) -> Counter[tuple[int, int]]:
    return Counter((row["_ng_task_index"], row["_ng_rollout_index"])
                   for row in map(orjson.loads, path.read_bytes().splitlines()))


def test_a_resumed_reverification_carries_each_failure_once(tmp_path: Path) -> None:
    source, output = _finished_run(tmp_path / "run"), tmp_path / "again" / "rollouts.jsonl"
    failures = RunPaths(output).failures
    answering = asyncio.Event()  # a /verify has arrived: the carried records before it are written

    async def held(row: dict[str, Any]) -> dict[str, Any]:
        answering.set()
        return await asyncio.get_running_loop().create_future()  # never answered: the run is stopped meanwhile

    async def main() -> Any:
        async with InProcessStack(on_verify=held) as stack:
            for run in range(1 + RESUMES):  # each stopped while verifying
                config = RolloutReverificationConfig.from_mapping({
                    "input_jsonl_fpath": str(source), "output_jsonl_fpath": str(output),
                    "head_server_url": stack.url, "resume_from_cache": run > 0, "num_samples_in_parallel": 1,
                    "disable_aggregation": True})
                answering.clear()
                stopped = asyncio.create_task(reverify_rollouts(config))
                await answering.wait()
                stopped.cancel()
                await asyncio.gather(stopped, return_exceptions=True)
                assert _keys(failures) == Counter({(task, 0): 1 for task in CARRIED}), f"after run {run}"
            stack.on_verify = verified
            return await reverify_rollouts(config)

    summary = asyncio.run(main())
    assert summary.failed == len(CARRIED) and summary.succeeded == len(VERIFIED)
    assert _keys(failures) == Counter({(task, 0): 1 for task in CARRIED})
    assert _keys(output) == Counter({(task, 0): 1 for task in VERIFIED})

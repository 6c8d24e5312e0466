"""A progress file that cannot be written (a full disk) is warned about once and tried again at every tick; the run
goes on and ends as it would have. The failures happen by construction: the writer raises ENOSPC for its first
writes (or all of them), and the agent answers only once the ticker has got past them."""

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from nemo_gym.rollout_collection import run_counters
from nemo_gym.rollout_collection.collect import collect_rollouts
from nemo_gym.rollout_collection.config import RolloutCollectionConfig
from nemo_gym.rollout_collection.progress_file import FINISHED, read_progress
from nemo_gym.run_files.paths import RunPaths
from tests.collection.inprocess_stack import AGENT, InProcessStack, rollout

ROWS = 4
FAILING = 3  # writes the full disk refuses first
WAIT_S = 30.0  # only reached when the ticker stopped: the rollouts then fail instead of hanging the test


@pytest.mark.parametrize("recovers", [True, False], ids=["disk_freed", "disk_full_to_the_end"])
def test_a_progress_file_write_that_fails_is_warned_once_and_the_run_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recovers: bool) -> None:
    writes: list[str] = []  # the state of each write the ticker tried
    real_write = run_counters.write_progress
    enough = asyncio.Event()  # the ticker went on past the failures (and, when the disk is freed, wrote again)

    def full_disk(path: Path, snapshot: dict[str, Any]) -> None:
        writes.append(snapshot["state"])
        if len(writes) > FAILING and recovers:
            real_write(path, snapshot)
            enough.set()
            return
        if len(writes) > FAILING:
            enough.set()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    async def after_the_failures(row: dict[str, Any]) -> dict[str, Any]:
        await asyncio.wait_for(enough.wait(), WAIT_S)
        return await rollout(row)

    monkeypatch.setattr(run_counters, "write_progress", full_disk)
    monkeypatch.setattr(run_counters, "INTERVAL_S", 0.01)  # the ticks, not the wait, are what the test counts
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b"".join(orjson.dumps({"responses_create_params": {"input": f"q{i}"}}) + b"\n"
                              for i in range(ROWS)))
    output = tmp_path / "out" / "rollouts.jsonl"

    async def main() -> Any:
        async with InProcessStack(on_run=after_the_failures) as stack:
            config = RolloutCollectionConfig.from_mapping({
                "input_jsonl_fpath": str(rows), "output_jsonl_fpath": str(output), "agent_name": AGENT,
                "head_server_url": stack.url, "preflight": False, "disable_aggregation": True, "max_attempts": 1})
            return await collect_rollouts(config)

    summary = asyncio.run(main())
    assert summary.ok and summary.succeeded == ROWS and summary.failed == 0
    assert len(output.read_bytes().splitlines()) == ROWS
    assert len(writes) > FAILING + 1 and writes[-1] == FINISHED  # it kept ticking, and wrote the end
    paths = RunPaths(str(output))
    warnings = [line for line in paths.collect_log.read_text().splitlines() if "progress file" in line]
    assert warnings == [f"warning: cannot write the progress file {paths.progress} ([Errno {errno.ENOSPC}] "
                        f"{os.strerror(errno.ENOSPC)}: '{paths.progress}'); the run goes on, and the file is tried "
                        f"again every 0.01 s"]
    if recovers:
        assert read_progress(paths.progress)["state"] == FINISHED and read_progress(paths.progress)["done"] == ROWS
    else:
        assert not paths.progress.exists()

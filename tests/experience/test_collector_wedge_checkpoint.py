"""Wedge: a non-atomic checkpoint. The reference saved the dataloader cursor apart from (and ahead of) the buffer;
a resumed run skipped about 30% of its prompts. Here one file, written atomically, holds the cursor together with
every prompt drawn but not yet trained, so a restore regenerates exactly the missing ones; and a writer process
killed with SIGKILL anywhere in the write leaves the old checkpoint or the new one."""

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from nemo_gym.experience.collector import checkpoint as collector_checkpoint
from nemo_gym.experience.errors import CollectorCheckpointError
from tests.experience.checkpoint_writer import CHECKPOINT_NAME
from tests.experience.collector_fakes import (
    ScriptedRolloutManager,
    no_thread_leak,
    running_collector,
    train_step,
    train_until_exhausted,
    wait_for,
)
from tests.helpers.stack import REPO_ROOT

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures(no_thread_leak.__name__)]

PROMPTS = 30
KILL_SEED = 20261125
# Where each writer is killed, and which checkpoint it must leave: the rename is the moment the new one counts.
OLD_AT = ("bytes", "fsync", "replace")
NEW_AT = ("dir_fsync", "written")


def test_a_failed_write_raises_and_keeps_the_previous_checkpoint_whole(tmp_path, monkeypatch) -> None:
    path = tmp_path / "collector.pt"
    with running_collector(ScriptedRolloutManager(), 40) as (collector, buffer):
        train_step(collector, buffer, 0, 4, 2, timeout_s=5)
        collector.save_checkpoint(path)
        before = path.read_bytes()

        def failing_save(payload, f):
            f.write(b"half a checkpoint")
            raise OSError("disk full")

        monkeypatch.setattr(collector_checkpoint.torch, "save", failing_save)
        with pytest.raises(CollectorCheckpointError, match="disk full"):
            collector.save_checkpoint(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["collector.pt"]  # no temporary file left behind
    assert collector_checkpoint.read_checkpoint(path)["weight_version"] == 1


def test_a_checkpoint_taken_while_prompts_are_drawn_and_in_flight_skips_none(tmp_path) -> None:
    path = tmp_path / "collector.pt"
    trained = []
    # Batches of 6 with 4 prompts a step: the dataloader's cursor is always ahead of what was generated. In order,
    # prompts 0-11 fill steps 0-2; the groups of steps 3 and 4 (12-19) are held until the checkpoint is written.
    saved = threading.Event()
    manager = ScriptedRolloutManager(gates={i: saved.is_set for i in range(12, 30)})
    with running_collector(manager, 30, batch_size=6, max_epochs=1, shuffle=False,
                           in_flight_weight_updates=True) as (collector, buffer):
        for step in range(2):
            trained += train_step(collector, buffer, step, 4, 2, timeout_s=20)
        assert wait_for(lambda: manager.running == 8, 20)
        collector.save_checkpoint(path)
        saved.set()
        state = collector_checkpoint.read_checkpoint(path)
        assert [p.idx for p in state["in_flight"]] == list(range(12, 20))
        assert state["source"]["dataloader"]["batches_yielded"] == 4  # 24 prompts drawn from the loader
        assert [p.idx for p in state["source"]["pending"]] == [20, 21, 22, 23]
        train_step(collector, buffer, 2, 4, 2, timeout_s=20)  # trained after the checkpoint: lost in the "crash"

    with running_collector(ScriptedRolloutManager(), 30, batch_size=6, max_epochs=1, shuffle=False, start_step=2,
                           checkpoint=path) as (collector, buffer):
        resumed, step = train_until_exhausted(collector, buffer, 2, 4, 2, timeout_s=20)
        trained += resumed
        assert step == 7
        assert buffer.count_by_target() == {7: 2}  # 30 prompts = 7 steps of 4 + 2 left for a last, partial one
    leftover = {e.prompt.key for e in buffer.state_dict()["entries"]}
    assert sorted(trained + sorted(leftover)) == [(0, i) for i in range(30)]


def _kill_writers(state_path: Path, points: dict[str, Path]) -> dict[str, int]:
    """Run a writer process per point (tests/experience/checkpoint_writer.py), SIGKILL each once it stands at its
    point; the pid each had."""
    specs = [f"{folder}={point}" for point, folder in points.items()]
    writers = subprocess.Popen([sys.executable, "-m", "tests.experience.checkpoint_writer", str(state_path), *specs],
                               cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pids = {}
        while len(pids) < len(points):
            line = writers.stdout.readline()
            assert line, f"the writers ended early with {writers.wait()}"
            pid, point = line.split()
            pids[point] = int(pid)
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)
        ends = dict(line.split(" exit ") for line in writers.stdout.read().splitlines())
        assert writers.wait() == 0
    finally:
        if writers.poll() is None:
            os.killpg(writers.pid, signal.SIGKILL)
            writers.wait()
    assert ends == {str(pid): str(-signal.SIGKILL) for pid in pids.values()}
    return pids


@pytest.mark.timeout(120)
def test_sigkill_of_a_writer_at_seeded_points_leaves_the_old_or_the_new_checkpoint(tmp_path) -> None:
    old_path, state_path = tmp_path / "old.pt", tmp_path / "new_state.pt"
    trained = []
    with running_collector(ScriptedRolloutManager(), PROMPTS, batch_size=6, max_epochs=1) as (collector, buffer):
        for step in range(2):
            trained += train_step(collector, buffer, step, 4, 2, timeout_s=5)
        collector.save_checkpoint(old_path)
        before = {"old": list(trained)}
        trained += train_step(collector, buffer, 2, 4, 2, timeout_s=5)
        new_state = collector.state_dict()
        before["new"] = list(trained)
    torch.save(new_state, state_path)
    # The writers' state as they have it, loaded back: its checkpoint is the size theirs reach (torch.save's output
    # for the live state may differ by a few bytes of pickle).
    collector_checkpoint.write_checkpoint(tmp_path / "complete.pt", torch.load(state_path, weights_only=False))
    size = (tmp_path / "complete.pt").stat().st_size
    offsets = sorted(random.Random(KILL_SEED).sample(range(1, size), 3))
    points = {f"bytes:{n}": tmp_path / f"bytes_{n}" for n in offsets}
    points.update({point: tmp_path / point for point in (*OLD_AT[1:], *NEW_AT)})
    for folder in points.values():
        folder.mkdir()
        shutil.copy(old_path, folder / CHECKPOINT_NAME)

    pids = _kill_writers(state_path, points)

    for point, folder in points.items():
        kind, _, written = point.partition(":")
        which = "old" if kind in OLD_AT else "new"
        state = collector_checkpoint.read_checkpoint(folder / CHECKPOINT_NAME)
        assert state["weight_version"] == {"old": 2, "new": 3}[which], point
        # The killed writer's temporary file: torn at its seeded byte, whole before the rename, gone after it.
        torn = folder / f".{CHECKPOINT_NAME}.tmp-{pids[point]}"
        if which == "new":
            assert not torn.exists(), point
        else:
            assert torn.stat().st_size == (int(written) if written else size), point
        first_step = {"old": 2, "new": 3}[which]
        with running_collector(ScriptedRolloutManager(), PROMPTS, batch_size=6, max_epochs=1, start_step=first_step,
                               checkpoint=folder / CHECKPOINT_NAME) as (collector, buffer):
            resumed, _ = train_until_exhausted(collector, buffer, first_step, 4, 2, timeout_s=5)
        leftover = [e.prompt.key for e in buffer.state_dict()["entries"]]
        assert sorted(before[which] + resumed + leftover) == [(0, i) for i in range(PROMPTS)], point

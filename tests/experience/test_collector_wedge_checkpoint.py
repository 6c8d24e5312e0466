"""Wedge: a non-atomic checkpoint. The reference saved the dataloader cursor apart from (and ahead of) the buffer;
a resumed run skipped about 30% of its prompts. Here one file, written atomically, holds the cursor together with
every prompt drawn but not yet trained, so a restore regenerates exactly the missing ones."""

import os
import time

import pytest

from nemo_gym.experience.collector import checkpoint as collector_checkpoint
from nemo_gym.experience.errors import CollectorCheckpointError
from tests.experience.collector_fakes import (
    ScriptedRolloutManager,
    no_thread_leak,
    running_collector,
    train_step,
    train_until_exhausted,
)

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures(no_thread_leak.__name__)]


def test_a_crash_while_writing_a_checkpoint_keeps_the_previous_one_whole(tmp_path, monkeypatch) -> None:
    path = tmp_path / "collector.pt"
    with running_collector(ScriptedRolloutManager(), 40) as (collector, buffer):
        train_step(collector, buffer, 0, 4, 2, timeout_s=5)
        collector.save_checkpoint(path)
        before = path.read_bytes()

        def torn_save(payload, f):
            f.write(b"half a checkpoint")
            raise OSError("disk full")

        monkeypatch.setattr(collector_checkpoint.torch, "save", torn_save)
        with pytest.raises(CollectorCheckpointError, match="disk full"):
            collector.save_checkpoint(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["collector.pt"]  # no temporary file left behind
    assert collector_checkpoint.read_checkpoint(path)["weight_version"] == 1


def test_a_checkpoint_taken_while_prompts_are_drawn_and_in_flight_skips_none(tmp_path) -> None:
    path = tmp_path / "collector.pt"
    trained = []
    # Batches of 6 with 4 prompts a step: the dataloader's cursor is always ahead of what was generated.
    with running_collector(ScriptedRolloutManager(delay_s=0.05), 30, batch_size=6, max_epochs=1,
                           in_flight_weight_updates=True) as (collector, buffer):
        for step in range(2):
            trained += train_step(collector, buffer, step, 4, 2, timeout_s=5)
        while not collector.get_metrics()["groups_in_flight"]:
            time.sleep(0.001)
        collector.save_checkpoint(path)
        state = collector_checkpoint.read_checkpoint(path)
        assert state["in_flight"] and state["source"]["dataloader"]["batches_yielded"] > 0
        train_step(collector, buffer, 2, 4, 2, timeout_s=5)  # trained after the checkpoint: lost in the "crash"

    with running_collector(ScriptedRolloutManager(), 30, batch_size=6, max_epochs=1, start_step=2,
                           checkpoint=path) as (collector, buffer):
        resumed, step = train_until_exhausted(collector, buffer, 2, 4, 2, timeout_s=5)
        trained += resumed
        assert step == 7
        assert buffer.count_by_target() == {7: 2}  # 30 prompts = 7 steps of 4 + 2 left for a last, partial one
    leftover = {e.prompt.key for e in buffer.state_dict()["entries"]}
    assert sorted(trained + sorted(leftover)) == [(0, i) for i in range(30)]

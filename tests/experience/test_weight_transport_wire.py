"""The gloo wire of the CPU weight transport (generation/gloo_wire.py) between a trainer and a receiver: a staged
receive hands on the whole set only, and a trainer process killed mid-broadcast fails the receive within seconds
(not after the group's timeout), with every buffer given back. Also what a WeightSource must agree with."""

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import torch

from nemo_gym.experience.generation.gloo_wire import StagedReceive, TrainerGroup, join_group
from nemo_gym.experience.generation.weight_source import ModuleWeights, TensorMeta, checked_tensors, weight_source
from tests.helpers.stack import REPO_ROOT

N_TENSORS, KILLED_AFTER, TIMEOUT_S = 8, 3, 120.0
METAS = [TensorMeta(f"t{i}", torch.float32 if i % 2 else torch.bfloat16, (256, 1024)) for i in range(N_TENSORS)]

# The trainer's side in a process of its own: it prints its group's port, waits for the receiver to join, sends
# KILLED_AFTER tensors and SIGKILLs itself before the next one.
TRAINER = f"""
import os, signal, sys, torch
from nemo_gym.experience.generation.gloo_wire import TrainerGroup
from tests.experience.test_weight_transport_wire import METAS, KILLED_AFTER, tensor_of

class KilledAfter:
    def metadata(self):
        return METAS

    def __iter__(self):
        for i, meta in enumerate(METAS):
            if i == KILLED_AFTER:
                print(f"sent {{i}}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            yield meta.name, tensor_of(meta)

group = TrainerGroup("127.0.0.1", 2, {TIMEOUT_S})
print(group.port, flush=True)
group.connect()
group.send(KilledAfter(), METAS)
"""


def tensor_of(meta: TensorMeta) -> torch.Tensor:
    return torch.full(meta.shape, float(meta.name[1:]), dtype=meta.dtype)


class Tensors:
    def metadata(self) -> list[TensorMeta]:
        return METAS

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return ((meta.name, tensor_of(meta)) for meta in METAS)


def test_a_staged_receive_hands_on_every_tensor_once_all_arrived() -> None:
    group = TrainerGroup("127.0.0.1", 2, TIMEOUT_S)
    receiver: dict[str, StagedReceive] = {}

    def join() -> None:
        receiver["receive"] = StagedReceive(join_group("127.0.0.1", group.port, 1, 2, TIMEOUT_S), METAS)

    joining = threading.Thread(target=join)
    joining.start()
    group.connect()
    joining.join()
    assert group.send(Tensors(), METAS) == sum(meta.nbytes for meta in METAS) == 6 * 2**20
    received = dict(receiver["receive"].tensors(TIMEOUT_S))
    assert list(received) == [meta.name for meta in METAS]
    assert all(torch.equal(received[meta.name], tensor_of(meta)) for meta in METAS)
    group.close()


def test_a_trainer_killed_mid_broadcast_fails_the_receive_within_seconds() -> None:
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        port = int(trainer.stdout.readline())
        receive = StagedReceive(join_group("127.0.0.1", port, 1, 2, TIMEOUT_S), METAS)
        assert trainer.stdout.readline().strip() == f"sent {KILLED_AFTER}"
        assert trainer.wait(timeout=60) == -9  # SIGKILL, by its own hand, mid-broadcast
        started = time.monotonic()
        with pytest.raises(RuntimeError, match=rf"the broadcast stopped after [0-{KILLED_AFTER}] of {N_TENSORS} "
                                               rf"tensors"):
            receive.tensors(TIMEOUT_S)
        assert time.monotonic() - started < 30 < TIMEOUT_S  # the dead peer is seen, not waited out
        assert receive.done() and receive.buffers == []  # the staged memory went back at once
    finally:
        trainer.kill()
        trainer.wait()


def test_a_source_must_yield_what_its_metadata_declares() -> None:
    model = torch.nn.Linear(3, 2)
    source = weight_source(model)
    assert isinstance(source, ModuleWeights)
    assert [(m.name, m.shape, m.nbytes) for m in source.metadata()] == [("weight", (2, 3), 24), ("bias", (2,), 8)]
    declared = source.metadata()
    with pytest.raises(ValueError, match="yielded 2 tensors, but its metadata declared 3"):
        list(checked_tensors(source, [*declared, TensorMeta("extra", torch.float32, (1,))]))
    with pytest.raises(ValueError, match="more tensors than its metadata declared \\(1\\); the first extra one is "
                                         "'bias'"):
        list(checked_tensors(source, declared[:1]))
    with pytest.raises(ValueError, match="tensor 1 is 'bias' float32 \\(2,\\), but its metadata declared 'bias' "
                                         "float32 \\(3,\\)"):
        list(checked_tensors(source, [declared[0], TensorMeta("bias", torch.float32, (3,))]))
    transposed = torch.nn.Linear(2, 2)
    transposed.weight.data = transposed.weight.data.t()  # a view that is not contiguous: sent as a contiguous copy
    assert all(t.is_contiguous() for _, t in checked_tensors(ModuleWeights(transposed),
                                                             ModuleWeights(transposed).metadata()))


def test_the_trainer_side_and_the_gpu_tests_import_no_vllm() -> None:
    """A trainer needs no vLLM, and the GPU machines that run the gpu tests have none."""
    code = ("import sys, nemo_gym.experience.generation, nemo_gym.experience.generation.nccl_wire, "
            "tests.experience.test_weight_transport_nccl_gpu, tests.experience.test_weight_updates_hf; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm'))")
    imported = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=300, check=True)
    assert imported.stdout.strip() == "[]"

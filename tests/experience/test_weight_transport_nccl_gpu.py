"""The trainer's side of the nccl weight transport (generation/nccl_wire.py) between two processes on CUDA, float32
and bfloat16: the trainer mints the NCCL unique id, and a worker process that does what vLLM's `nccl` engine does in
its unique-id, unpacked mode (join at rank `rank_offset`, the one-element float32 all-reduce handshake, then one
broadcast per tensor in the order of the update's names) receives every tensor exactly. No vLLM is imported: the GPU
machines that run these tests have none.

On a machine with one GPU both processes use it: each says it is another host (NCCL_HOSTID), so NCCL connects them
over sockets on loopback instead of refusing two ranks on one device."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nemo_gym.experience.generation.weight_source import ModuleWeights, dtype_name

REPO_ROOT = Path(__file__).resolve().parents[2]  # not tests.helpers: the processes below import this module

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

# The trainer: its model on `device` ("cuda" or "cpu": a CPU model's tensors are moved to the GPU to be sent).
TRAINER = """
import json, sys, torch
from nemo_gym.experience.generation.nccl_wire import NcclTrainerGroup
from nemo_gym.experience.generation.weight_source import ModuleWeights
from tests.experience.test_weight_transport_nccl_gpu import synthetic_model

torch.cuda.set_device(0)
source = ModuleWeights(synthetic_model(getattr(torch, sys.argv[1])).to(sys.argv[2]))
group = NcclTrainerGroup(2)
print(json.dumps(group.init_info()), flush=True)
group.connect()
print(f"sent {group.send(source, source.metadata())}", flush=True)
"""

# vLLM's worker side, without vLLM: what NCCLWeightTransferEngine does with packed=False and a unique id.
WORKER = """
import base64, json, sys, torch
from nemo_gym.experience.generation.nccl_lib import NcclCommunicator
from tests.experience.test_weight_transport_nccl_gpu import synthetic_model

init_info, update_info = json.loads(sys.argv[1]), json.loads(sys.argv[2])
device = torch.device("cuda", int(sys.argv[3]))
assert init_info["packed"] is False and init_info["rank_offset"] == 1
torch.cuda.set_device(device)
comm = NcclCommunicator(init_info["world_size"], base64.b64decode(init_info["nccl_unique_id_b64"]),
                        init_info["rank_offset"])
handshake = torch.zeros(1, dtype=torch.float32, device=device)
comm.all_reduce_sum(handshake)
received = {}
for name, dtype, shape in zip(update_info["names"], update_info["dtype_names"], update_info["shapes"]):
    buffer = torch.empty(shape, dtype=getattr(torch, dtype), device=device)
    comm.broadcast(buffer, root=0)
    received[name] = buffer
torch.cuda.synchronize(device)
expected = dict(synthetic_model(getattr(torch, sys.argv[4])).named_parameters())
equal = [name for name, tensor in received.items() if torch.equal(tensor.cpu(), expected[name].detach())]
print(f"received {len(received)}, equal {len(equal)}", flush=True)
"""


def synthetic_model(dtype: torch.dtype) -> torch.nn.Module:
    """The same weights in every process: an embedding, linear layers with and without bias, a norm."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(4096, 256), torch.nn.Linear(256, 1024), torch.nn.LayerNorm(1024),
                                torch.nn.Linear(1024, 256, bias=False))
    return model.to(dtype)


def _env(host: str) -> dict[str, str]:
    # A distinct host id per process: NCCL then joins two ranks on one GPU over its socket transport, on loopback.
    return {**os.environ, "NCCL_HOSTID": host, "NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1",
            "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN")}


@pytest.mark.parametrize("dtype, trainer_device", [("float32", "cpu"), ("bfloat16", "cuda")])
def test_the_trainer_broadcasts_every_tensor_to_a_worker_as_vllms_nccl_engine_receives_them(
        dtype: str, trainer_device: str) -> None:
    if not torch.cuda.is_available():
        pytest.fail("the gpu tests need a CUDA device; deselect them with -m 'not gpu' on machines without one")
    metas = ModuleWeights(synthetic_model(getattr(torch, dtype))).metadata()
    update_info = {"names": [m.name for m in metas], "dtype_names": [dtype_name(m.dtype) for m in metas],
                   "shapes": [list(m.shape) for m in metas]}
    worker_device = "1" if torch.cuda.device_count() > 1 else "0"
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, dtype, trainer_device], cwd=REPO_ROOT,
                               env=_env("nemo-gym-trainer"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        init_info = json.loads(trainer.stdout.readline() or "null")
        assert init_info is not None, trainer.communicate(timeout=60)[1][-3000:]
        assert init_info["world_size"] == 2 and init_info["packed"] is False
        worker = subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(init_info), json.dumps(update_info),
                                   worker_device, dtype], cwd=REPO_ROOT, env=_env("nemo-gym-worker"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        trainer_out, trainer_err = trainer.communicate(timeout=240)
        worker_out, worker_err = worker.communicate(timeout=60)
    finally:
        for process in (trainer, worker):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    assert trainer.returncode == 0, trainer_err[-3000:]
    assert worker.returncode == 0, worker_err[-3000:]
    # The last line: NCCL may print its version before it.
    assert trainer_out.strip().splitlines()[-1] == f"sent {sum(m.nbytes for m in metas)}"
    assert worker_out.strip().splitlines()[-1] == f"received {len(metas)}, equal {len(metas)}"

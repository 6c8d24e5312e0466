"""The trainer's side of the nccl weight transport (generation/nccl_wire.py) between two processes on CUDA, float32
and bfloat16: the trainer mints the NCCL unique id, and a worker process that does what vLLM's `nccl` engine does in
its unique-id, unpacked mode (join at rank `rank_offset`, the one-element float32 all-reduce handshake, then one
broadcast per tensor in the order of the update's names) receives every tensor exactly. And the real abort path: a
join no worker makes ends at its timeout, close() ends one at once, and close() ends a broadcast whose worker stopped
receiving, by ncclCommAbort (ncclCommDestroy would wait for it for ever). No vLLM is imported: the GPU machines that
run these tests have none.

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
group = NcclTrainerGroup(2, timeout_s=120)
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
comm.join(120)
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


# A trainer alone: its join ends at its timeout; then a join closed while in progress ends at once.
LONELY_TRAINER = """
import json, threading, time, torch
from nemo_gym.experience.generation.nccl_lib import NcclError
from nemo_gym.experience.generation.nccl_wire import NcclTrainerGroup

torch.cuda.set_device(0)
result = {}
group = NcclTrainerGroup(2, timeout_s=3)
started = time.monotonic()
try:
    group.connect()
except NcclError as exc:
    result["timed_out"] = [time.monotonic() - started, str(exc)]
group.close()
group = NcclTrainerGroup(2, timeout_s=600)
raised = []

def connect():
    try:
        group.connect()
    except NcclError as exc:
        raised.append(str(exc))

joining = threading.Thread(target=connect)
joining.start()
while group._comm is None and joining.is_alive():  # until the init has begun: close() then aborts it mid-join
    time.sleep(0.01)
started = time.monotonic()
group.close()
result["close_s"] = time.monotonic() - started
joining.join(timeout=60)
result["joining"] = joining.is_alive()
result["raised"] = raised
print(json.dumps(result), flush=True)
"""

# A trainer whose worker stops receiving: close() once the test says so (a line on stdin), while send() waits.
STALLED_TRAINER = """
import json, sys, threading, time, torch
from nemo_gym.experience.generation.nccl_lib import NcclError
from nemo_gym.experience.generation.nccl_wire import NcclTrainerGroup
from nemo_gym.experience.generation.weight_source import ModuleWeights
from tests.experience.test_weight_transport_nccl_gpu import large_model

torch.cuda.set_device(0)
source = ModuleWeights(large_model().to("cuda"))
group = NcclTrainerGroup(2, timeout_s=120)
print(json.dumps(group.init_info()), flush=True)
group.connect()
raised = []

def send():
    try:
        group.send(source, source.metadata())
    except NcclError as exc:
        raised.append(str(exc))

sending = threading.Thread(target=send)
sending.start()
sys.stdin.readline()
started = time.monotonic()
group.close()
closed_s = time.monotonic() - started
sending.join(timeout=60)
print(json.dumps({"close_s": closed_s, "sending": sending.is_alive(), "raised": raised}), flush=True)
"""

# A worker that joins, takes the first tensor, says so, and then never receives again (alive, its sockets open).
STALLING_WORKER = """
import base64, json, sys, time, torch
from nemo_gym.experience.generation.nccl_lib import NcclCommunicator

init_info, shape = json.loads(sys.argv[1]), json.loads(sys.argv[2])
device = torch.device("cuda", int(sys.argv[3]))
torch.cuda.set_device(device)
comm = NcclCommunicator(init_info["world_size"], base64.b64decode(init_info["nccl_unique_id_b64"]),
                        init_info["rank_offset"])
comm.join(120)
comm.all_reduce_sum(torch.zeros(1, dtype=torch.float32, device=device))
comm.broadcast(torch.empty(shape, dtype=torch.float32, device=device), root=0)
torch.cuda.synchronize(device)
print("received 1", flush=True)
time.sleep(600)
"""


def large_model() -> torch.nn.Module:
    """Eight 64 MiB matrices: far more than NCCL's buffers hold, so broadcasts that no worker receives stall."""
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(4096, 4096, bias=False) for _ in range(8)))


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


def _require_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.fail("the gpu tests need a CUDA device; deselect them with -m 'not gpu' on machines without one")


def _printed(process: subprocess.Popen, line: str) -> bool:
    """Whether `process` prints `line` before its stdout ends (NCCL may print its version first)."""
    assert process.stdout is not None
    return any(printed.strip() == line for printed in process.stdout)


def test_a_join_no_worker_makes_ends_at_its_timeout_and_close_ends_one_at_once() -> None:
    _require_cuda()
    lonely = subprocess.run([sys.executable, "-c", LONELY_TRAINER], cwd=REPO_ROOT, env=_env("nemo-gym-trainer"),
                            capture_output=True, text=True, timeout=240)
    assert lonely.returncode == 0, lonely.stderr[-3000:]
    result = json.loads(lonely.stdout.strip().splitlines()[-1])
    took, why = result["timed_out"]
    assert 3 <= took < 30 and why == "not every rank joined the NCCL communicator in 3 s"
    assert result["close_s"] < 30 and result["joining"] is False
    assert result["raised"] == ["the NCCL communicator was aborted"]


def test_close_aborts_a_broadcast_whose_worker_stopped_receiving() -> None:
    _require_cuda()
    worker_device = "1" if torch.cuda.device_count() > 1 else "0"
    trainer = subprocess.Popen([sys.executable, "-c", STALLED_TRAINER], cwd=REPO_ROOT, env=_env("nemo-gym-trainer"),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        assert trainer.stdout is not None and trainer.stdin is not None
        init_info = json.loads(trainer.stdout.readline() or "null")
        assert init_info is not None, trainer.communicate(timeout=60)[1][-3000:]
        worker = subprocess.Popen([sys.executable, "-c", STALLING_WORKER, json.dumps(init_info),
                                   json.dumps([4096, 4096]), worker_device], cwd=REPO_ROOT,
                                  env=_env("nemo-gym-worker"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        assert _printed(worker, "received 1"), worker.communicate(timeout=60)[1][-3000:]
        trainer.stdin.write("close\n")  # the trainer's send now waits on broadcasts nobody receives
        trainer.stdin.flush()
        trainer_out, trainer_err = trainer.communicate(timeout=120)  # ncclCommDestroy would hang here
    finally:
        for process in (trainer, worker):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    assert trainer.returncode == 0, trainer_err[-3000:]
    result = json.loads(trainer_out.strip().splitlines()[-1])
    assert result["close_s"] < 30 and result["sending"] is False
    assert result["raised"] == ["the NCCL communicator was aborted"]

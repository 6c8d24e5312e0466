"""The trainer's end of vLLM's `nccl` weight-transfer engine, with PyTorch alone: a trainer on a GPU needs no vLLM.

vLLM's engine (vllm.distributed.weight_transfer.nccl_engine) takes a rendezvous by NCCL unique id
(`nccl_unique_id_b64` in the init info, the mode vLLM offers trainers that do not run its own process group): the
trainer mints the id, every worker joins the communicator with it at rank `rank_offset` + its worker rank, and
right after joining each rank issues a one-element float32 all-reduce, which every peer must match before anything
else. Then, unpacked (`packed: false`), the trainer broadcasts each tensor from rank 0 in the order of the update's
names, and the workers load each one as it arrives.

The NCCL calls go through nccl_lib (ctypes on the libnccl PyTorch ships; `torch.cuda.nccl` fails on current
Pythons).
"""

import base64
from typing import Any, Optional

import torch

from nemo_gym.experience.generation.nccl_lib import NcclCommunicator, unique_id
from nemo_gym.experience.generation.weight_source import TensorMeta, WeightSource, checked_tensors


class NcclTrainerGroup:
    """Rank 0 of a communicator with one replica's `world_size - 1` workers, on this process's current CUDA
    device. `init_info()` is what the replica's /init_weight_transfer_engine takes; `connect()` blocks until every
    worker joined (run it while that request is in flight: the workers join inside it)."""

    def __init__(self, world_size: int) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("the nccl weight transport needs a CUDA device in the trainer's process")
        self.world_size = world_size
        self.device = torch.device("cuda", torch.cuda.current_device())
        self._unique_id: bytes = unique_id()
        self._comm: Optional[NcclCommunicator] = None

    def init_info(self) -> dict[str, Any]:
        return {"nccl_unique_id_b64": base64.b64encode(self._unique_id).decode("ascii"), "rank_offset": 1,
                "world_size": self.world_size, "packed": False}

    def connect(self) -> None:
        with torch.cuda.device(self.device):
            comm = NcclCommunicator(self.world_size, self._unique_id, 0)
            warm_up = torch.zeros(1, dtype=torch.float32, device=self.device)
            comm.all_reduce_sum(warm_up)  # the handshake vLLM's communicator makes right after joining
            torch.cuda.synchronize(self.device)
        self._comm = comm

    def send(self, source: WeightSource, metas: list[TensorMeta]) -> int:
        """Broadcast every tensor of `source` (checked against `metas`, what the workers were told), from this
        device; returns once all have left, with the bytes sent to each worker."""
        if self._comm is None:
            raise RuntimeError("connect() the trainer's NCCL group before sending")
        sent = 0
        with torch.cuda.device(self.device):
            for meta, tensor in checked_tensors(source, metas):
                self._comm.broadcast(tensor.to(self.device).contiguous(), root=0)
                sent += meta.nbytes
            torch.cuda.synchronize(self.device)
        return sent

    def close(self) -> None:
        if self._comm is not None:
            comm, self._comm = self._comm, None
            comm.close()

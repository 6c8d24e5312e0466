"""The few NCCL calls the nccl weight transport makes, bound with ctypes to the libnccl that PyTorch's CUDA build
ships (the `nvidia-nccl` wheel, or any libnccl.so.2 the loader finds).

Not `torch.cuda.nccl`: its communicator init parses the unique id with a `#` format that Python 3.10+ refuses
("PY_SSIZE_T_CLEAN macro must be defined"), so it fails on every current Python. vLLM binds libnccl itself for the
same reason; this is the trainer's own small binding, so a trainer needs no vLLM.
"""

import ctypes
import functools
import sys
from pathlib import Path
from typing import Any

import torch

UNIQUE_ID_BYTES = 128  # sizeof(ncclUniqueId) in nccl.h
_SUM = 0  # ncclSum
# ncclDataType_t values from nccl.h.
_DTYPES: dict[torch.dtype, int] = {
    torch.int8: 0, torch.uint8: 1, torch.bool: 1, torch.int32: 2, torch.int64: 4,
    torch.float16: 6, torch.float32: 7, torch.float64: 8, torch.bfloat16: 9,
}


class NcclError(RuntimeError):
    """A libnccl call returned an error, or no libnccl could be loaded."""


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * UNIQUE_ID_BYTES)]


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
        lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, _UniqueId, ctypes.c_int]
        lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclBroadcast.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
        return lib
    raise NcclError("no libnccl could be loaded (PyTorch's CUDA build ships it): " + "; ".join(errors))


def _check(call: str, result: int) -> None:
    if result != 0:
        raise NcclError(f"{call} failed: {_lib().ncclGetErrorString(result).decode(errors='replace')} ({result})")


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
    """This process's rank in a communicator of `world_size` ranks that join with the same `uid`; on the current
    CUDA device. Blocks until every rank joined. Collectives run on the current stream of the tensor's device."""

    def __init__(self, world_size: int, uid: bytes, rank: int) -> None:
        if len(uid) != UNIQUE_ID_BYTES:
            raise NcclError(f"an NCCL unique id is {UNIQUE_ID_BYTES} bytes, not {len(uid)}")
        handle = ctypes.c_void_p()
        _check("ncclCommInitRank", _lib().ncclCommInitRank(ctypes.byref(handle), world_size,
                                                            _UniqueId.from_buffer_copy(uid), rank))
        self._handle: ctypes.c_void_p | None = handle

    def _comm(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise NcclError("the NCCL communicator is closed")
        return self._handle

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        """Sum `tensor` (contiguous, on CUDA) over every rank, in place."""
        pointer = ctypes.c_void_p(tensor.data_ptr())
        _check("ncclAllReduce", _lib().ncclAllReduce(pointer, pointer, tensor.numel(), _dtype(tensor), _SUM,
                                                     self._comm(), _stream(tensor)))

    def broadcast(self, tensor: torch.Tensor, root: int) -> None:
        """`root`'s `tensor` (contiguous, on CUDA) into every rank's `tensor`, in place."""
        pointer = ctypes.c_void_p(tensor.data_ptr())
        _check("ncclBroadcast", _lib().ncclBroadcast(pointer, pointer, tensor.numel(), _dtype(tensor), root,
                                                     self._comm(), _stream(tensor)))

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _check("ncclCommDestroy", _lib().ncclCommDestroy(handle))

"""What a trainer pushes through a collective weight transport: named tensors straight from its model, no folder.

A `WeightSource` declares its tensors (`metadata()`: name, dtype and shape of each, in order) without moving any,
and yields them (`iter(source)`) in that order, a fresh pass per push. The receiving side sizes its buffers from the
metadata before a byte moves, so the two must agree: `checked_tensors` enforces that tensor by tensor and raises
before it hands on the first one that differs. `ModuleWeights` is the common case, a torch module's parameters (a
tied weight once, as `named_parameters` lists it, which is also what `save_pretrained` writes), under the names a
transformers checkpoint uses and vLLM's `load_weights` takes.

Only torch is imported here: a trainer on a GPU machine without vLLM uses it as it is.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@dataclass(frozen=True)
class TensorMeta:
    """One tensor as the receiving side must expect it."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        elements = 1
        for dim in self.shape:
            elements *= dim
        return elements * self.dtype.itemsize


@runtime_checkable
class WeightSource(Protocol):
    """Named tensors a trainer pushes: `metadata()` declares them, iteration yields them in the same order."""

    def metadata(self) -> list[TensorMeta]:
        """Every tensor's name, dtype and shape, in the order iteration yields them; moves no data."""
        ...

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        """A fresh pass over (name, tensor), in metadata order."""
        ...


class ModuleWeights:
    """The parameters of a torch module (a transformers model), detached, in `named_parameters` order."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def metadata(self) -> list[TensorMeta]:
        return [TensorMeta(name, p.dtype, tuple(p.shape)) for name, p in self.module.named_parameters()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, parameter in self.module.named_parameters():
            yield name, parameter.detach()


def weight_source(weights: torch.nn.Module | WeightSource) -> WeightSource:
    """`weights` as a WeightSource: a module's parameters, or the source itself; TypeError for anything else."""
    if isinstance(weights, torch.nn.Module):
        return ModuleWeights(weights)
    if isinstance(weights, WeightSource):
        return weights
    raise TypeError(f"a collective weight transport sends a torch.nn.Module or a WeightSource (metadata() and "
                    f"iteration of named tensors), not {type(weights).__name__}")


def dtype_name(dtype: torch.dtype) -> str:
    """The name vLLM's weight-transfer payloads use for a dtype: "float32", "bfloat16", ..."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{name!r} is not a torch dtype")
    return dtype


def checked_tensors(source: WeightSource, metas: list[TensorMeta]) -> Iterator[tuple[TensorMeta, torch.Tensor]]:
    """Each (meta, tensor) of `source`, contiguous, once it matches the metadata the receiver was told; ValueError
    naming the first tensor that differs, the first one too many, or how many are missing."""
    sent = 0
    for name, tensor in source:
        if sent == len(metas):
            raise ValueError(f"the weight source yielded more tensors than its metadata declared ({len(metas)}); "
                             f"the first extra one is {name!r}")
        meta = metas[sent]
        if (name, tensor.dtype, tuple(tensor.shape)) != (meta.name, meta.dtype, meta.shape):
            raise ValueError(f"the weight source's tensor {sent} is {name!r} {dtype_name(tensor.dtype)} "
                             f"{tuple(tensor.shape)}, but its metadata declared {meta.name!r} "
                             f"{dtype_name(meta.dtype)} {meta.shape}")
        sent += 1
        yield meta, tensor.contiguous()
    if sent != len(metas):
        raise ValueError(f"the weight source yielded {sent} tensors, but its metadata declared {len(metas)}")

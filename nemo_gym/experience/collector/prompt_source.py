"""Prompts for the asynchronous collector, one at a time, across epochs, with retries and a consistent state.

The collector needs prompts one by one (a target may need only part of a batch) and must be able to put a prompt
back (a failed attempt, an evicted group, a restore). The source keeps, besides the dataloader's own cursor, every
prompt it handed out that the dataloader no longer knows about: the rest of a partly used batch (`pending`) and
put-back prompts (`requeued`). Its state plus the collector's in-flight prompts and the buffer's entries is thus
every prompt drawn but not yet trained, which is what makes a checkpoint lose nothing and repeat nothing.
"""

from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Optional, Protocol, cast

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.interfaces import DatumSpec


class StatefulLoader(Protocol):
    """What the collector needs of a dataloader: iteration over batches and a resumable cursor."""

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class PendingPrompt:
    """One prompt drawn from the dataloader; (epoch, idx) names it, `attempts` counts failed generations of it."""

    datum: DatumSpec
    epoch: int
    idx: int
    attempts: int = 0

    @property
    def key(self) -> tuple[int, int]:
        return (self.epoch, self.idx)


def batch_rows(batch: Any) -> list[DatumSpec]:
    """The DatumSpec rows of one dataloader batch: a BatchedDataDict (or plain dict) of columns, or a list."""
    if isinstance(batch, (BatchedDataDict, dict)):
        size = BatchedDataDict(batch).size
        return [cast(DatumSpec, {key: _row(column, i) for key, column in batch.items()}) for i in range(size)]
    if isinstance(batch, (list, tuple)):
        return list(batch)
    raise TypeError(f"a dataloader batch must be a BatchedDataDict, a dict of columns or a list, not {type(batch)}")


def _row(column: Any, i: int) -> Any:
    value = column[i]
    # A collated idx column is a tensor; the prompt key wants a plain int.
    return value.item() if isinstance(value, torch.Tensor) and value.dim() == 0 else value


class PromptSource:
    """Draws prompts in order: put-back prompts first, then the rest of the current batch, then the dataloader.

    At the end of the dataloader it starts the next epoch (re-iterating the loader) until `max_epochs` passes
    are done; `idx` is the datum's own `idx` or, when absent, its position in the epoch.
    """

    def __init__(self, dataloader: StatefulLoader, max_epochs: Optional[int] = None) -> None:
        self._dataloader = dataloader
        self._max_epochs = max_epochs
        self._iterator: Optional[Iterator[Any]] = None
        self._requeued: deque[PendingPrompt] = deque()
        self._pending: deque[PendingPrompt] = deque()
        self.epoch = 0
        self._drawn_in_epoch = 0
        self._empty_epoch = False

    @property
    def exhausted(self) -> bool:
        """Nothing more will come from the dataloader (put-back prompts may still be queued)."""
        return self._empty_epoch or (self._max_epochs is not None and self.epoch >= self._max_epochs)

    @property
    def exhausted_reason(self) -> str:
        if self._empty_epoch:
            return f"the dataloader yielded no prompt in epoch {self.epoch}"
        return f"all {self._max_epochs} epoch(s) of the dataloader were generated"

    def next_prompt(self) -> Optional[PendingPrompt]:
        """The next prompt to generate, or None once every epoch is drawn and nothing was put back."""
        if self._requeued:
            return self._requeued.popleft()
        while not self._pending and not self.exhausted:
            self._draw_batch()
        return self._pending.popleft() if self._pending else None

    def requeue(self, prompts: Iterable[PendingPrompt]) -> None:
        """Put prompts back in front, in the given order (they were drawn before anything still pending)."""
        self._requeued.extendleft(reversed(list(prompts)))

    def has_queued(self) -> bool:
        return bool(self._requeued or self._pending)

    def _draw_batch(self) -> None:
        if self._iterator is None:
            self._iterator = iter(self._dataloader)
        try:
            batch = next(self._iterator)
        except StopIteration:
            self._end_epoch()
            return
        for datum in batch_rows(batch):
            idx = datum.get("idx")
            idx = self._drawn_in_epoch if idx is None else int(idx)
            self._pending.append(PendingPrompt(datum=datum, epoch=self.epoch, idx=idx))
            self._drawn_in_epoch += 1

    def _end_epoch(self) -> None:
        self._iterator = None
        if self._drawn_in_epoch == 0:
            # An empty pass would otherwise start the next, empty, epoch forever.
            self._empty_epoch = True
            return
        self.epoch += 1
        self._drawn_in_epoch = 0

    def state_dict(self) -> dict[str, Any]:
        """The dataloader's cursor plus every prompt drawn past it that is not yet generated."""
        return {
            "dataloader": self._dataloader.state_dict() if hasattr(self._dataloader, "state_dict") else {},
            "epoch": self.epoch,
            "drawn_in_epoch": self._drawn_in_epoch,
            # Copies: a prompt drawn after the snapshot gets its attempt count changed.
            "requeued": [replace(p) for p in self._requeued],
            "pending": [replace(p) for p in self._pending],
            "empty_epoch": self._empty_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["dataloader"]:
            self._dataloader.load_state_dict(state["dataloader"])
        self._iterator = None
        self.epoch = state["epoch"]
        self._drawn_in_epoch = state["drawn_in_epoch"]
        self._requeued = deque(state["requeued"])
        self._pending = deque(state["pending"])
        # max_epochs is not restored: a resumed run may be given more (or fewer) epochs than the saved one.
        self._empty_epoch = state["empty_epoch"]

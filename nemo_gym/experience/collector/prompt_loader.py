"""A small resumable prompt dataloader (for users without torchdata's StatefulDataLoader, and for tests).

Each pass over the dataset is one epoch, shuffled by `seed + epoch` so any epoch's order is reproducible without
replaying earlier ones. The state is (epoch, batches yielded in it): restoring it and iterating continues the
interrupted epoch exactly where it stopped; a restored epoch that had already yielded its last batch yields
nothing, so a consumer counting epochs by the end of iteration stays in step.
"""

import random
from typing import Any, Iterator, Sequence

from nemo_gym.experience.interfaces import DatumSpec


class StatefulPromptLoader:
    """Batches (lists) of DatumSpec from `dataset`; `state_dict` / `load_state_dict` resume mid-epoch."""

    def __init__(self, dataset: Sequence[DatumSpec], batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._dataset = dataset
        self._batch_size = batch_size
        self._shuffle = shuffle
        self._seed = seed
        self._drop_last = drop_last
        self._epoch = 0
        self._batches_yielded = 0

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(len(self._dataset), self._batch_size)
        return full if self._drop_last or rest == 0 else full + 1

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self._dataset)))
        if self._shuffle:
            random.Random(self._seed + epoch).shuffle(order)
        return order

    def __iter__(self) -> Iterator[list[DatumSpec]]:
        order = self._order(self._epoch)
        while self._batches_yielded < len(self):
            start = self._batches_yielded * self._batch_size
            batch = [self._dataset[i] for i in order[start:start + self._batch_size]]
            # Count the batch before handing it out: a state taken while the consumer holds it must not
            # yield it again on restore.
            self._batches_yielded += 1
            yield batch
        self._epoch += 1
        self._batches_yielded = 0

    def _order_settings(self) -> dict[str, Any]:
        """What decides which prompt each cursor position is: a state saved under other settings names others."""
        return {"seed": self._seed, "shuffle": self._shuffle, "batch_size": self._batch_size,
                "dataset_size": len(self._dataset), "drop_last": self._drop_last}

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "batches_yielded": self._batches_yielded, **self._order_settings()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, ours in self._order_settings().items():
            if key in state and state[key] != ours:
                raise ValueError(f"loader state was saved with {key}={state[key]!r}, this loader has {key}={ours!r}: "
                                 f"its cursor would name other prompts")
        self._epoch = state["epoch"]
        self._batches_yielded = state["batches_yielded"]

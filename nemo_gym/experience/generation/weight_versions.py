"""Which weight versions a generation's tokens came from, when weight updates land while it runs.

vLLM's `keep` pause freezes the requests in flight; after the new weights are loaded they go on, so a request that
spans an update has its first tokens from the old version and the rest from the new one. The OpenAI completions
reply does not say where the switch happened, so a generation is tagged with the version served when it was sent
plus the target of every update that was under way or began before its reply arrived. That set never misses a
version that produced one of its tokens; it can hold one more (an update that landed after the engine's last token
but before the reply reached us), which only makes a trainer treat the sample as more off-policy than it is.
"""

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class VersionMark:
    """Taken when a generation is sent; `WeightVersionLog.since` turns it into the versions it may have used."""

    version: int
    updates_started: int
    updating_to: Optional[int]


class WeightVersionLog:
    """The backend's current version and every update attempt's target, in order. Not thread-safe: one thread
    (the backend's event loop) marks, begins and ends."""

    def __init__(self, version: int) -> None:
        self.version = version
        self._targets: list[int] = []
        self._updating_to: Optional[int] = None

    def mark(self) -> VersionMark:
        return VersionMark(self.version, len(self._targets), self._updating_to)

    def since(self, mark: VersionMark) -> tuple[int, ...]:
        """The versions whose weights may have generated tokens between `mark` and now, ascending."""
        versions = {mark.version, *self._targets[mark.updates_started:]}
        if mark.updating_to is not None:
            versions.add(mark.updating_to)
        return tuple(sorted(versions))

    def begin(self, target: int) -> None:
        self._targets.append(target)
        self._updating_to = target

    def end(self, succeeded: bool) -> None:
        """The update finished; on success its target is the version served from now on."""
        if succeeded and self._updating_to is not None:
            self.version = self._updating_to
        self._updating_to = None

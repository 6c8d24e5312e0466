"""The collective weight transports of VllmHttpGeneration: tensors straight from the trainer's model into each vLLM
replica over vLLM's weight-transfer API (its RL routes at the server root, dev mode), no folder in between.

Each replica gets a process group of its own with the trainer (rank 0), set up at its first push
(/init_weight_transfer_engine) and kept for the next ones; a push that fails or is cancelled drops it (an nccl one
is aborted), and the next push sets up a new one. One replica's failure is then its own, as with the disk transport.

- `gloo` (CPU): our engine (gloo_engine.py, registered in vLLM by nemo_gym.vllm_plugin). The replica arms a staged
  receive (/start_weight_update, /update_weights phase "receive", /finish_weight_update), the trainer broadcasts
  every tensor while the replica keeps generating on the old weights, and only then is the replica paused (keep)
  to load the complete set (phase "apply") and take the version (/finish_weight_update with it). A trainer that
  dies before the apply leaves the replica unpaused, on the old weights.
- `nccl` (CUDA): vLLM's own engine, which loads each tensor as it arrives: the replica is paused first, then
  /start_weight_update, /update_weights (the names, dtypes and shapes) while the trainer broadcasts
  (nccl_wire.py), /finish_weight_update with the version. A failure or a cancel after the start leaves the model
  half-loaded: the replica stays paused and the error says to restart it.
Both then drop the prefix cache, resume and check /weight_info, as the disk transport does (vllm_refit.py).
"""

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Optional, Protocol, TypeVar

from nemo_gym.experience.generation.gloo_wire import MODEL_LEFT_INCOMPLETE, TrainerGroup
from nemo_gym.experience.generation.nccl_wire import NcclTrainerGroup
from nemo_gym.experience.generation.vllm_refit import (
    CONTROL_TIMEOUT_S,
    Step,
    TransferFailed,
    Weights,
    call,
    describe_failure,
    paused_update,
)
from nemo_gym.experience.generation.weight_source import TensorMeta, WeightSource, dtype_name
from nemo_gym.http_client import HttpClient, RequestFailed

DISK, GLOO, NCCL = "disk", "gloo", "nccl"
WEIGHT_TRANSPORTS = (DISK, GLOO, NCCL)
_T = TypeVar("_T")


class _TrainerGroup(Protocol):
    def init_info(self) -> dict[str, Any]: ...

    def connect(self) -> None: ...

    def send(self, source: WeightSource, metas: list[TensorMeta]) -> int: ...

    def close(self) -> None: ...


async def _in_thread(function: Callable[[], _T]) -> _T:
    """`function()` in a daemon thread of its own: a collective waiting on a dead peer blocks until its own
    timeout, and must hold up neither an executor's shutdown nor the interpreter's exit meanwhile."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(result: Optional[_T], error: Optional[BaseException]) -> None:
        if future.done():  # the awaiting task was cancelled
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]  # None only with an error

    def hand_over(result: Optional[_T], error: Optional[BaseException]) -> None:
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop closed while this waited (a timed-out rendezvous): nobody awaits it now
            pass

    def run() -> None:
        try:
            result = function()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            hand_over(None, exc)
        else:
            hand_over(result, None)

    threading.Thread(target=run, name="nemo_gym-weight-transfer", daemon=True).start()
    return await future


def _transfer_failure(step: str, exc: BaseException) -> str:
    """The failure text of a data-plane error (the trainer's side of a broadcast or a rendezvous)."""
    kind = "invalid_weights" if isinstance(exc, ValueError) else "transfer"
    return f"{kind} at {step}: {type(exc).__name__}: {exc}"


def _update_info(metas: list[TensorMeta]) -> dict[str, Any]:
    return {"names": [m.name for m in metas], "dtype_names": [dtype_name(m.dtype) for m in metas],
            "shapes": [list(m.shape) for m in metas]}


class CollectiveTransport:
    """Pushes a WeightSource into replicas over `backend` ("gloo" or "nccl"), one group per replica root.

    `address` is where a gloo group's store listens, for the replicas' workers to reach (loopback by default);
    `timeout_s` bounds a replica's rendezvous, each broadcast, and its paused section."""

    def __init__(self, backend: str, http: HttpClient, headers: dict[str, str], timeout_s: float,
                 address: str) -> None:
        if backend not in (GLOO, NCCL):
            raise ValueError(f"a collective weight transport is {GLOO!r} or {NCCL!r}, not {backend!r}")
        self.backend, self.address = backend, address
        self._http, self._headers, self._timeout_s = http, headers, timeout_s
        self._groups: dict[str, _TrainerGroup] = {}

    async def push(self, root: str, source: WeightSource, metas: list[TensorMeta], version: int,
                   step: Step) -> Optional[str]:
        """Send `source` (declared by `metas`) into the replica at `root` as `version`; None once it serves and
        reports `version`, else why not."""
        group = self._groups.get(root)
        if group is None:
            step.enter("init_weight_transfer_engine")
            group, failure = await self._connect(root)
            if group is None:
                return failure
        push = self._push_gloo if self.backend == GLOO else self._push_nccl
        try:
            failure = await push(root, group, source, metas, version, step)
        except BaseException:  # cancelled: the group may be mid-collective, its thread waiting on the replica
            self._drop(root)
            raise
        if failure is not None:  # the group may be mid-collective or broken: the next push sets up a new one
            self._drop(root)
        return failure

    def close(self) -> None:
        for root in list(self._groups):
            self._drop(root)

    def _drop(self, root: str) -> None:
        group = self._groups.pop(root, None)
        if group is not None:
            group.close()

    async def _connect(self, root: str) -> tuple[Optional[_TrainerGroup], Optional[str]]:
        try:
            async with asyncio.timeout(CONTROL_TIMEOUT_S):
                reply = await call(self._http, root, "/get_world_size", None, CONTROL_TIMEOUT_S, self._headers)
            world_size = 1 + int(reply["world_size"])
        except (RequestFailed, TimeoutError) as exc:
            return None, describe_failure("get_world_size", exc)
        except (KeyError, TypeError, ValueError) as exc:
            return None, f"invalid_response at get_world_size: {type(exc).__name__}: {exc}"
        try:
            group: _TrainerGroup = (TrainerGroup(self.address, world_size, self._timeout_s) if self.backend == GLOO
                                    else NcclTrainerGroup(world_size, self._timeout_s))
        except (RuntimeError, OSError) as exc:
            return None, _transfer_failure("init_weight_transfer_engine", exc)
        # The replica's workers join inside the init request, so the trainer joins while it is in flight.
        init = asyncio.ensure_future(call(self._http, root, "/init_weight_transfer_engine",
                                          {"init_info": group.init_info()}, self._timeout_s, self._headers))
        joined = asyncio.ensure_future(_in_thread(group.connect))
        try:
            async with asyncio.timeout(self._timeout_s):
                await asyncio.gather(init, joined)
        except BaseException as exc:
            # Failed, timed out or cancelled: closing the group ends the trainer's wait for the workers at once.
            for task in (init, joined):
                task.cancel()
            group.close()
            if isinstance(exc, (RequestFailed, TimeoutError)):
                return None, describe_failure("init_weight_transfer_engine", exc)
            if isinstance(exc, Exception):  # the trainer's side of the rendezvous
                return None, _transfer_failure("init_weight_transfer_engine", exc)
            raise
        self._groups[root] = group
        return group, None

    async def _push_gloo(self, root: str, group: _TrainerGroup, source: WeightSource, metas: list[TensorMeta],
                         version: int, step: Step) -> Optional[str]:
        http, headers, timeout_s = self._http, self._headers, self._timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                step.enter("start_weight_update")
                await call(http, root, "/start_weight_update", {}, timeout_s, headers)
                step.enter("arm_receive")
                await call(http, root, "/update_weights", {"update_info": {"phase": "receive", **_update_info(metas)}},
                           timeout_s, headers)
                step.enter("finish_weight_update")
                await call(http, root, "/finish_weight_update", {}, timeout_s, headers)
        except (RequestFailed, TimeoutError) as exc:
            return describe_failure(step.name, exc)
        step.enter("broadcast")
        try:
            await _in_thread(lambda: group.send(source, metas))
        except Exception as exc:  # noqa: BLE001 - nothing was applied and nothing paused: the replica serves on
            return _transfer_failure("broadcast", exc)

        async def apply(step: Step) -> None:
            step.enter("start_weight_update")
            await call(http, root, "/start_weight_update", {}, timeout_s, headers)
            step.enter("apply")
            step.weights = Weights.PARTIAL
            try:
                await call(http, root, "/update_weights", {"update_info": {"phase": "apply"}}, timeout_s, headers)
            except RequestFailed as exc:
                # The engine says whether it began loading; without that, the receive had failed: nothing changed.
                if MODEL_LEFT_INCOMPLETE not in f"{exc.message} {exc.body}":
                    step.weights = Weights.OLD
                raise
            step.weights = Weights.NEW
            step.enter("finish_weight_update")
            await call(http, root, "/finish_weight_update", {"weight_version": str(version)}, timeout_s, headers)

        return await paused_update(http, root, version, timeout_s, headers, apply, step)

    async def _push_nccl(self, root: str, group: _TrainerGroup, source: WeightSource, metas: list[TensorMeta],
                         version: int, step: Step) -> Optional[str]:
        http, headers, timeout_s = self._http, self._headers, self._timeout_s

        async def load(step: Step) -> None:
            step.enter("start_weight_update")
            step.weights = Weights.PARTIAL  # vLLM's nccl engine begins its layerwise reload here
            await call(http, root, "/start_weight_update", {}, timeout_s, headers)
            step.enter("update_weights")
            # The workers receive inside this request, in the same NCCL calls as the trainer's broadcast, and load
            # each tensor as it arrives.
            try:
                await asyncio.gather(
                    call(http, root, "/update_weights", {"update_info": _update_info(metas)}, timeout_s, headers),
                    _in_thread(lambda: group.send(source, metas)))
            except Exception as exc:  # noqa: BLE001 - the trainer's side of the broadcast failed
                if isinstance(exc, RequestFailed):
                    raise
                raise TransferFailed(_transfer_failure("broadcast", exc)) from None
            step.enter("finish_weight_update")
            await call(http, root, "/finish_weight_update", {"weight_version": str(version)}, timeout_s, headers)
            step.weights = Weights.NEW  # the engine's finish completes the layerwise reload

        return await paused_update(http, root, version, timeout_s, headers, load, step)

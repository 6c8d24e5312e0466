"""The CPU weight-transfer engine, on vLLM's side: a `WeightTransferEngine` that vLLM's `WeightTransferEngineFactory`
creates in each worker of a vLLM started with `--weight-transfer-config '{"backend": "nemo_gym_gloo"}'`
(nemo_gym.vllm_plugin registers it, through vLLM's general plugins). It is imported only inside vLLM's processes.

vLLM's RL routes drive it (/init_weight_transfer_engine, /start_weight_update, /update_weights,
/finish_weight_update), each a collective RPC to the workers. One update is two `update_weights` calls:

- `{"phase": "receive", names, dtype_names, shapes}` arms a receive: buffers for every tensor, filled by a
  background thread from the trainer's broadcast (gloo_wire.StagedReceive). It returns at once; the engine keeps
  generating on the old weights while the tensors arrive.
- `{"phase": "apply"}` (the trainer sends it once its broadcast is done, with generation paused) waits for the last
  tensor and loads the complete set into the model the way vLLM's own reload does (layerwise reload: every layer's
  weights processed into its kernel format). A receive that failed (the trainer died, the group broke) raises
  before anything is touched: the model keeps the old weights. The applied buffers are kept for the next receive
  of the same tensors (fresh memory costs a page fault per page as the data lands, about as long as the copy): each
  worker holds one more copy of the weights from the first push on.

If loading itself fails (a name or shape the model does not take), the model is left half-loaded: the error says
so (gloo_wire.MODEL_LEFT_INCOMPLETE), the trainer leaves the replica paused, and this engine refuses every later
update: restart the replica.

vLLM's base `update_weights` ends with `torch.accelerator.synchronize()`, which raises where there is no
accelerator (a CPU build of torch), so this engine overrides it; nothing here runs asynchronously on a device.
"""

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.model_executor.model_loader.reload import finalize_layerwise_processing, initialize_layerwise_reload

from nemo_gym.config.timeouts import WEIGHT_UPDATE_TIMEOUT_S
from nemo_gym.experience.generation.gloo_wire import MODEL_LEFT_INCOMPLETE, StagedReceive, join_group
from nemo_gym.experience.generation.torch_private import ProcessGroupGloo
from nemo_gym.experience.generation.weight_source import TensorMeta, dtype_from_name

RECEIVE, APPLY = "receive", "apply"


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    """Where the trainer's group is: its TCPStore, this replica's first rank in it, and its size."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    timeout_s: float = WEIGHT_UPDATE_TIMEOUT_S


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    phase: str
    names: list[str] = field(default_factory=list)
    dtype_names: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.phase not in (RECEIVE, APPLY):
            raise ValueError(f"phase must be {RECEIVE!r} or {APPLY!r}, not {self.phase!r}")
        if not len(self.names) == len(self.dtype_names) == len(self.shapes):
            raise ValueError(f"names, dtype_names and shapes differ in length ({len(self.names)}, "
                             f"{len(self.dtype_names)}, {len(self.shapes)})")

    def metas(self) -> list[TensorMeta]:
        return [TensorMeta(name, dtype_from_name(dtype), tuple(shape))
                for name, dtype, shape in zip(self.names, self.dtype_names, self.shapes)]


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    """Staged gloo receive into a vLLM worker's model (see the module docstring)."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config: Any, vllm_config: Any, device: torch.device, model: torch.nn.Module) -> None:
        super().__init__(config, vllm_config, device, model)
        self._group: Optional[ProcessGroupGloo] = None
        self._timeout_s = WEIGHT_UPDATE_TIMEOUT_S
        self._receive: Optional[StagedReceive] = None
        self._applied: Optional[StagedReceive] = None  # the last applied one: its buffers serve the next receive
        self._broken: Optional[str] = None

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        """Join the trainer's group (again, for a new trainer or after a failed push); blocks until every rank has.
        A receive still armed on an older group is dropped."""
        parallel = self.parallel_config
        rank = parallel.data_parallel_index * parallel.world_size + parallel.rank + init_info.rank_offset
        self._receive = None
        self._group = None
        self._timeout_s = init_info.timeout_s
        self._group = join_group(init_info.master_address, init_info.master_port, rank, init_info.world_size,
                                 init_info.timeout_s)

    def start_weight_update(self) -> None:
        """Nothing to prepare: `update_weights` phases do the work (the session only brackets each call)."""

    def finish_weight_update(self) -> None:
        """Nothing to finish: the apply phase loaded and processed everything."""

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self._broken is not None:
            raise RuntimeError(f"{MODEL_LEFT_INCOMPLETE} since an earlier update ({self._broken}): restart the "
                               f"replica")
        if update_info.phase == RECEIVE:
            self._arm(update_info.metas())
        else:
            self._apply()

    def _arm(self, metas: list[TensorMeta]) -> None:
        if self._group is None:
            raise RuntimeError("no trainer group: call /init_weight_transfer_engine first")
        if self._receive is not None and not self._receive.done():
            raise RuntimeError("a receive is still under way on this group: re-initialize the engine for a new one")
        self._receive = None  # a finished one nobody applied: its buffers go before the new ones are allocated
        applied, self._applied = self._applied, None
        reused = applied.buffers if applied is not None and applied.metas == metas else None
        del applied  # buffers of other tensors go before the new ones are allocated
        self._receive = StagedReceive(self._group, metas, reused)

    def _apply(self) -> None:
        receive, self._receive = self._receive, None
        if receive is None:
            raise RuntimeError("nothing to apply: no receive was armed (the model is unchanged)")
        tensors = receive.tensors(self._timeout_s)  # raises, with the model unchanged, if the broadcast broke
        try:
            initialize_layerwise_reload(self.model)
            self.model.load_weights(tensors)  # type: ignore[operator]  # every vLLM model defines it
            finalize_layerwise_processing(self.model, self.model_config)
            self._applied = receive
        except Exception as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise RuntimeError(f"{MODEL_LEFT_INCOMPLETE}: loading the received weights failed ({self._broken}); "
                               f"restart the replica") from exc

    def shutdown(self) -> None:
        self._receive = self._applied = None
        self._group = None

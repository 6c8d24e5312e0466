"""A generation backend that runs a Hugging Face transformers causal LM in this process (CPU by default).

Meant for small models, tests and machines without vLLM: it decodes a whole batch together (hf_decoding.py) and is
far slower than vLLM on anything large. One generation runs at a time (a lock around the model); `generate_async`
runs it in a worker thread so the caller's event loop keeps running, and yields each sample as it finishes.
`update_weights` copies a trainer's weights folder into the model under the same lock, so an update lands between
generations, never inside one.
"""

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, AsyncIterator, Callable, Optional

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.errors import GenerationError, WeightUpdateError
from nemo_gym.experience.generation.hf_decoding import decode_batch
from nemo_gym.experience.generation.interfaces import (
    GenerationConfig,
    GenerationDatumSpec,
    GenerationInterface,
    GenerationOutputSpec,
)
from nemo_gym.experience.generation.samples import (
    NO_ROOM,
    GeneratedSample,
    SampleRequest,
    pack_outputs,
    require_config,
    sample_requests,
)
from nemo_gym.experience.generation.settings import sampling_of, stop_token_ids_of
from nemo_gym.experience.generation.weights import copy_weights_into, read_weights

OnFinished = Callable[[SampleRequest, GeneratedSample], None]
IN_PROCESS = "in-process model"  # how WeightUpdateError names this backend's one replica


def _as_id_set(value: Any) -> set[int]:
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, (list, tuple, set)) else {int(value)}


class HFGeneration(GenerationInterface):
    """In-process generation with transformers.

    `model` is a model folder (loaded with AutoModelForCausalLM / AutoTokenizer) or a loaded model, which then needs
    `tokenizer`. `device` defaults to "cpu" for a folder and to where a loaded model already is; `dtype` defaults to
    float32 on CPU and bfloat16 on GPUs. End-of-turn ids are the tokenizer's and the model's eos ids plus the config's
    `stop_token_ids`. `seed` makes sampled generation repeatable. `weight_version` is the version of the weights
    loaded now; `update_weights` waits at most `weight_update_timeout_s` for a running generation to finish.
    """

    supports_async = True

    def __init__(
        self,
        config: GenerationConfig,
        model: str | os.PathLike | PreTrainedModel,
        tokenizer: Any = None,
        *,
        device: Optional[str | torch.device] = None,
        dtype: Optional[torch.dtype] = None,
        seed: Optional[int] = None,
        weight_version: int = 0,
        weight_update_timeout_s: float = 600.0,
    ) -> None:
        require_config(config, ("max_new_tokens", "max_seq_len"), "HFGeneration")
        if isinstance(model, (str, os.PathLike)):
            device = torch.device(device or "cpu")
            dtype = dtype or (torch.float32 if device.type == "cpu" else torch.bfloat16)
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            loaded: PreTrainedModel = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
            # transformers wraps PreTrainedModel.to with functools.wraps, whose stub loses the bound self.
            loaded = loaded.to(device)  # type: ignore[arg-type]
        else:
            if tokenizer is None:
                raise ValueError("HFGeneration: a loaded model needs its tokenizer")
            loaded = model
            if device is not None or dtype is not None:
                loaded = loaded.to(device=device, dtype=dtype)  # type: ignore[call-arg]  # as above
        self.config = config
        self.model: Optional[PreTrainedModel] = loaded.eval()
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(_as_id_set(tokenizer.eos_token_id)
                                 | _as_id_set(getattr(loaded.generation_config, "eos_token_id", None))
                                 | set(stop_token_ids_of(config)))
        pad = next((p for p in (config.get("pad_token_id"), tokenizer.pad_token_id, tokenizer.eos_token_id)
                    if p is not None), None)
        if pad is None:
            raise ValueError("HFGeneration: no pad_token_id in the config and none in the tokenizer")
        self._pad_token_id = int(pad)
        self._generator = torch.Generator(device=loaded.device).manual_seed(seed) if seed is not None else None
        self._lock = threading.Lock()  # one generation at a time, whichever thread asks
        self._worker: Optional[ThreadPoolExecutor] = None
        self._weight_version = weight_version
        self._weight_update_timeout_s = weight_update_timeout_s

    @property
    def pad_token_id(self) -> int:
        return self._pad_token_id

    def update_weights(self, weights_dir: str | os.PathLike, version: int) -> None:
        """Copy the weights folder into the model, in place, between generations. The folder is read and matched
        against the model (names, shapes, no weight left out) before a parameter changes, so a failed update
        leaves the old weights; WeightUpdateError says why."""
        try:
            tensors = read_weights(weights_dir)
        except (ValueError, OSError, SafetensorError) as exc:
            raise WeightUpdateError(version, {IN_PROCESS: f"invalid_weights: {exc}"}, [],
                                    self._weight_version) from None
        if not self._lock.acquire(timeout=self._weight_update_timeout_s):
            raise WeightUpdateError(version, {IN_PROCESS: f"timeout: a generation held the model for over "
                                                          f"{self._weight_update_timeout_s} s"}, [],
                                    self._weight_version)
        try:
            if self.model is None:
                raise WeightUpdateError(version, {IN_PROCESS: "shut_down: HFGeneration was shut down"}, [],
                                        self._weight_version)
            try:
                copy_weights_into(self.model, tensors)
            except ValueError as exc:
                raise WeightUpdateError(version, {IN_PROCESS: f"invalid_weights: {exc}"}, [],
                                        self._weight_version) from None
            self._weight_version = version
        finally:
            self._lock.release()

    def invalidate_kv_cache(self) -> bool:
        """Nothing to drop: every generation computes its keys and values afresh, on the weights loaded then."""
        return True

    def generate(self, data: BatchedDataDict[GenerationDatumSpec],
                 greedy: bool = False) -> BatchedDataDict[GenerationOutputSpec]:
        requests = sample_requests(data, self.config)
        results: dict[int, GeneratedSample] = {r.index: NO_ROOM for r in requests if r.max_new_tokens == 0}
        self._decode([r for r in requests if r.max_new_tokens > 0], greedy,
                     lambda request, generated: results.__setitem__(request.index, generated))
        return pack_outputs(requests, [results[r.index] for r in requests], self.pad_token_id,
                            min_width=data["input_ids"].shape[1])

    async def generate_async(
        self, data: BatchedDataDict[GenerationDatumSpec], greedy: bool = False
    ) -> AsyncIterator[tuple[int, BatchedDataDict[GenerationOutputSpec]]]:
        requests = sample_requests(data, self.config)
        width = data["input_ids"].shape[1]
        for request in requests:
            if request.max_new_tokens == 0:
                yield request.index, pack_outputs([request], [NO_ROOM], self.pad_token_id, min_width=width)
        to_generate = [r for r in requests if r.max_new_tokens > 0]
        if not to_generate:
            return
        loop = asyncio.get_running_loop()
        finished: asyncio.Queue[tuple[SampleRequest, GeneratedSample] | BaseException] = asyncio.Queue()
        cancelled = threading.Event()

        def hand_over(item: tuple[SampleRequest, GeneratedSample] | BaseException) -> None:
            if not cancelled.is_set():  # once the consumer has gone, its loop may be closed
                loop.call_soon_threadsafe(finished.put_nowait, item)

        def work() -> None:
            try:
                self._decode(to_generate, greedy, lambda request, generated: hand_over((request, generated)),
                             cancelled)
            except BaseException as exc:  # delivered to the consumer, which raises it
                hand_over(exc)

        loop.run_in_executor(self._worker_thread(), work)
        try:
            for _ in to_generate:
                item = await finished.get()
                if isinstance(item, BaseException):
                    raise item
                request, generated = item
                yield request.index, pack_outputs([request], [generated], self.pad_token_id, min_width=width)
        finally:
            cancelled.set()  # the consumer stopped early or failed: the worker stops at its next token

    def shutdown(self) -> None:
        """Stop the worker thread and drop the model; the backend cannot generate afterwards."""
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
            self._worker = None
        with self._lock:
            self.model = None

    def __enter__(self) -> "HFGeneration":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def _worker_thread(self) -> ThreadPoolExecutor:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-generation")
        return self._worker

    def _decode(self, requests: list[SampleRequest], greedy: bool, on_finished: OnFinished,
                cancelled: Optional[threading.Event] = None) -> None:
        if not requests:
            return
        sampling = sampling_of(self.config, greedy=greedy)
        with self._lock:
            if self.model is None:
                raise RuntimeError("HFGeneration was shut down")
            versions = (self._weight_version,)  # fixed while the lock is held

            def tagged(request: SampleRequest, generated: GeneratedSample) -> None:
                on_finished(request, replace(generated, weight_versions=versions))

            try:
                decode_batch(self.model, self.tokenizer, requests, sampling=sampling, eos_ids=self.eos_ids,
                             pad_token_id=self.pad_token_id, on_finished=tagged, cancelled=cancelled,
                             generator=self._generator)
            except (RuntimeError, ValueError) as exc:  # how torch reports device, memory and shape failures
                indices = [r.index for r in requests]
                raise GenerationError(f"samples {indices}: {type(self.model).__name__} on {self.model.device} "
                                      f"failed: {type(exc).__name__}: {exc}") from exc

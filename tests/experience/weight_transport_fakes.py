"""A stand-in vLLM replica for the collective weight transport tests: vLLM's RL and dev routes as vLLM answers
them, over the real gloo engine (nemo_gym.experience.generation.gloo_engine) loading into a small torch model the
way vLLM's layerwise reload loads a vLLM model. Only the HTTP server and the model are stand-ins: the trainer's
side, the wire and the engine are the product's own. tests/experience/test_weight_transport_gloo_vllm.py runs the
same against a real vLLM."""

import asyncio
import threading
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any, Optional

import orjson
import pytest
import torch

from nemo_gym.experience.generation.gloo_wire import TrainerGroup

# vLLM is imported where it is used: GPU machines without vLLM collect this package's tests too.


class TinyModel(torch.nn.Module):
    """Three linear layers, loaded as vLLM loads its models: each parameter through its `weight_loader`."""

    def __init__(self, seed: int = 0) -> None:
        from vllm.model_executor.model_loader.reload import record_metadata_for_reloading

        super().__init__()
        torch.manual_seed(seed)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(64, 64) for _ in range(3)])
        record_metadata_for_reloading(self)  # what vLLM's model loader does once the model is built

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            parameter = params[name]  # a name the model lacks: KeyError, as in vLLM's models
            getattr(parameter, "weight_loader", default_weight_loader)(parameter, tensor)
            loaded.add(name)
        return loaded


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def _error(status: int, message: str) -> tuple[int, bytes]:
    return status, orjson.dumps({"error": {"message": message, "type": "InternalServerError", "code": status}})


class FakeReplica:
    """An async handler (path, body) -> (status, body) for tests.experience.generation_support.LoopbackServer.

    `fail` maps a path (or "apply", the apply phase of /update_weights) to a (status, message) answered instead.
    `paused` and `label` are what /is_paused and /weight_info would say; `model` is what it serves."""

    def __init__(self, seed: int = 0, fail: Optional[dict[str, tuple[int, str]]] = None) -> None:
        from nemo_gym.experience.generation.gloo_engine import GlooWeightTransferEngine

        self.model = TinyModel(seed)
        parallel = SimpleNamespace(data_parallel_index=0, world_size=1, rank=0)
        self.engine = GlooWeightTransferEngine(SimpleNamespace(backend="nemo_gym_gloo"),
                                               SimpleNamespace(parallel_config=parallel, model_config=None),
                                               torch.device("cpu"), self.model)
        self.fail = fail or {}
        self.paused = False
        self.label = "0"
        self._session = False  # vLLM's worker-level weight-update session (start ... finish)

    async def _in_worker(self, method: str, *args: Any) -> Optional[tuple[int, bytes]]:
        """Call the engine as vLLM's collective RPC does: off the event loop; an exception is a 500 with its text."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, getattr(self.engine, method), *args)
        except Exception as exc:  # noqa: BLE001 - what vLLM's API server turns any worker error into
            return _error(500, f"Call to collective_rpc method failed: Worker failed with error '{exc}'")
        return None

    async def __call__(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        info = body.get("update_info", {})
        failing = "apply" if path == "/update_weights" and info.get("phase") == "apply" else path
        if failing in self.fail:
            return _error(*self.fail[failing])
        ok = (200, orjson.dumps({"status": "ok"}))
        if path == "/get_world_size":
            return 200, orjson.dumps({"world_size": 1})
        if path == "/init_weight_transfer_engine":
            return await self._in_worker("init_transfer_engine", self.engine.parse_init_info(body["init_info"])) \
                or ok
        if path == "/start_weight_update":
            if self._session:
                return _error(500, "start_weight_update called while a weight update is already active")
            self._session = True
            return ok
        if path == "/update_weights":
            failure = await self._in_worker("update_weights", info)
            self._session = self._session and failure is None  # vLLM ends the session when a chunk fails
            return failure or ok
        if path == "/finish_weight_update":
            self._session = False
            if body.get("weight_version") is not None:
                self.label = body["weight_version"]
            return ok
        if path in ("/pause", "/resume"):
            self.paused = path == "/pause"
            return ok
        if path == "/reset_prefix_cache":
            return 200, orjson.dumps({"success": True})
        if path == "/weight_info":
            return 200, orjson.dumps({"weight_version": self.label})
        return _error(404, f"no route {path}")


def recorded_rendezvous(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The threads that run the trainer's side of a gloo rendezvous (`TrainerGroup.connect`), as they start."""
    threads: list[threading.Thread] = []
    connect = TrainerGroup.connect

    def recorded_connect(group: TrainerGroup) -> None:
        threads.append(threading.current_thread())
        connect(group)

    monkeypatch.setattr(TrainerGroup, "connect", recorded_connect)
    return threads

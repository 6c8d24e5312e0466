"""Stand-ins for what a NeMo RL trainer brings (Ray is not installed here, and must not become a dependency):

- `ActorHandle`: an environment as a Ray actor. `handle.step.remote(...)` runs the environment's `step` on the
  actor's own thread and returns a reference; calling `handle.step(...)` directly raises TypeError, as Ray does.
  The reference is awaitable like Ray's ObjectRef (`kind="awaitable"`), or only has `.future()`
  (`kind="future"`), or is opaque and needs `fake_ray_get` (`kind="opaque"`).
- `NemoRLEnvironmentReturn`: NeMo RL's own EnvironmentReturn (a NamedTuple with our fields, in the same order).
- `NemoRLStyleGeneration`: a backend written against NeMo RL's GenerationInterface: it keeps its config as `cfg`
  (`vllm_cfg.async_engine`, `_pad_token_id`, `max_new_tokens`), has no `supports_async` and no `pad_token_id`,
  reports no `truncated`, and ignores the per-sample `max_new_tokens` of its input (NeMo RL's backends only know
  max_model_len).
"""

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable, NamedTuple, Optional

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict

LOGPROB = -0.25


class NemoRLEnvironmentReturn(NamedTuple):
    observations: list
    metadata: list
    next_stop_strings: Optional[list]
    rewards: torch.Tensor
    terminateds: torch.Tensor
    answers: Optional[list]


class _Ref:
    """An object reference: the actor's result, once its thread has computed it."""

    def __init__(self, future: Future) -> None:
        self._future = future


class _AwaitableRef(_Ref):
    def __await__(self):  # Ray's ObjectRef is awaitable in asyncio
        return asyncio.wrap_future(self._future).__await__()


class _FutureRef(_Ref):
    def future(self) -> Future:
        return self._future


def fake_ray_get(ref: _Ref) -> Any:
    """`ray.get` for one reference: blocks until the actor has answered."""
    return ref._future.result()


class _ActorMethod:
    def __init__(self, method: Callable[..., Any], pool: ThreadPoolExecutor, kind: str) -> None:
        self._method, self._pool, self._kind = method, pool, kind

    def remote(self, *args: Any) -> _Ref:
        future = self._pool.submit(self._method, *args)
        return {"awaitable": _AwaitableRef, "future": _FutureRef, "opaque": _Ref}[self._kind](future)

    def __call__(self, *args: Any) -> Any:
        raise TypeError("Actor methods cannot be called directly. Instead of running 'object.step()', try "
                        "'object.step.remote()'.")


class ActorHandle:
    """`environment` living on its own thread, reachable only through `.remote` calls."""

    def __init__(self, environment: Any, kind: str = "awaitable") -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fake_actor")
        self.step = _ActorMethod(self._on_actor(environment.step), self._pool, kind)
        self.actor_threads: set[str] = set()

    def _on_actor(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            self.actor_threads.add(threading.current_thread().name)
            result = step(*args)
            return NemoRLEnvironmentReturn(result.observations, result.metadata, None, result.rewards,
                                           result.terminateds, None)
        return run

    def kill(self) -> None:
        self._pool.shutdown(wait=True)


class NemoRLStyleGeneration:
    """Answers every prompt with `reply` (token ids) cut to `cfg["max_new_tokens"]`, like a NeMo RL backend."""

    def __init__(self, reply: list[int], max_new_tokens: int, pad_token_id: int, async_engine: bool = True) -> None:
        self.reply = reply
        self.cfg = {"backend": "vllm", "max_new_tokens": max_new_tokens, "_pad_token_id": pad_token_id,
                    "vllm_cfg": {"async_engine": async_engine}}
        self.seen_inputs: list[BatchedDataDict] = []

    def _one(self, data: BatchedDataDict, i: int) -> BatchedDataDict:
        length = int(data["input_lengths"][i])
        generated = self.reply[: self.cfg["max_new_tokens"]]
        ids = torch.tensor([data["input_ids"][i, :length].tolist() + generated], dtype=torch.long)
        return BatchedDataDict(output_ids=ids,
                               logprobs=torch.tensor([[0.0] * length + [LOGPROB] * len(generated)]),
                               generation_lengths=torch.tensor([len(generated)]),
                               unpadded_sequence_lengths=torch.tensor([length + len(generated)]))

    def generate(self, data: BatchedDataDict, greedy: bool) -> BatchedDataDict:
        self.seen_inputs.append(data)
        return BatchedDataDict.from_batches([self._one(data, i) for i in range(data.size)],
                                            pad_value_dict={"output_ids": self.cfg["_pad_token_id"]})

    async def generate_async(self, data: BatchedDataDict, greedy: bool = False
                             ) -> AsyncIterator[tuple[int, BatchedDataDict]]:
        self.seen_inputs.append(data)
        for i in range(data.size):
            yield i, self._one(data, i)

    def prepare_for_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def finish_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

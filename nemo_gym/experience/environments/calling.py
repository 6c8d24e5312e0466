"""Calling an environment's `step` however it is written: a coroutine function, a plain function, or a remote
actor (NeMo RL runs its environments as Ray actors and calls `env.step.remote(...)`).

An actor handle is recognised by its `step.remote`; the future it returns is awaited when it is awaitable (a Ray
ObjectRef is), or through its `future()` (a concurrent.futures.Future), or with a resolver given by wrapping the
handle in `RemoteEnvironment(handle, resolve=ray.get)` (run in a worker thread, never on the event loop). Ray itself
is never imported. What comes back may be our EnvironmentReturn, NeMo RL's (a NamedTuple with the same fields in the
same order) or a plain tuple of those fields; `next_stop_strings` and `answers` may be None, as NeMo RL allows.
"""

import asyncio
import inspect
from typing import Any, Callable, Optional

import torch

from nemo_gym.experience.environments.interfaces import EnvironmentInterface, EnvironmentReturn
from nemo_gym.experience.errors import EnvironmentStepError

Resolver = Callable[[Any], Any]
_FIELDS = EnvironmentReturn._fields


def is_actor_handle(env: Any) -> bool:
    return callable(getattr(getattr(env, "step", None), "remote", None))


def check_environment(task_name: str, env: Any) -> None:
    """Refuse, before any rollout starts, an environment whose `step` cannot be called in any of the ways above."""
    if is_actor_handle(env) or callable(getattr(env, "step", None)):
        return
    hint = (" It looks like an actor class: create the actor first (`EnvClass.remote(...)`) and pass its handle."
            if callable(getattr(env, "remote", None)) else "")
    raise EnvironmentStepError(
        f"environment of task '{task_name}' ({type(env).__name__}) has no step(message_log_batch, metadata) "
        f"method and no step.remote(...) actor method.{hint}")


async def _resolve(future: Any, resolve: Optional[Resolver], where: str) -> Any:
    if inspect.isawaitable(future):
        return await future
    if callable(getattr(future, "future", None)):
        return await asyncio.wrap_future(future.future())
    if resolve is not None:
        return await asyncio.to_thread(resolve, future)
    raise EnvironmentStepError(
        f"{where}: step.remote(...) returned a {type(future).__name__}, which is neither awaitable nor has a "
        f".future(); wrap the actor handle with its resolver, e.g. RemoteEnvironment(handle, resolve=ray.get)")


class RemoteEnvironment(EnvironmentInterface):
    """An actor handle as an environment: `step` calls `handle.step.remote(...)` and resolves its future (with
    `resolve`, e.g. `ray.get`, when the future is neither awaitable nor has `.future()`)."""

    def __init__(self, handle: Any, resolve: Optional[Resolver] = None) -> None:
        if not is_actor_handle(handle):
            raise EnvironmentStepError(f"{type(handle).__name__} has no step.remote(...): not an actor handle")
        self.handle = handle
        self.resolve = resolve

    async def step(self, message_log_batch: list[list[dict[str, str]]],
                   metadata: list[Optional[dict[str, Any]]]) -> EnvironmentReturn:
        future = self.handle.step.remote(message_log_batch, metadata)
        # What the actor sent back; the step's caller checks it (as_environment_return).
        reply: EnvironmentReturn = await _resolve(future, self.resolve, f"actor {type(self.handle).__name__}")
        return reply


def as_environment_return(result: Any, where: str, size: int) -> EnvironmentReturn:
    """`result` as our EnvironmentReturn, checked to answer each of the `size` samples once."""
    if not isinstance(result, EnvironmentReturn):
        fields = getattr(result, "_fields", None)
        if not (isinstance(result, tuple) and 5 <= len(result) <= len(_FIELDS)
                and (fields is None or tuple(fields) == _FIELDS[: len(result)])):
            raise EnvironmentStepError(f"{where} returned {type(result).__name__}, not an EnvironmentReturn "
                                       f"({', '.join(_FIELDS)})")
        result = EnvironmentReturn(*result)
    checked: EnvironmentReturn = result._replace(
        next_stop_strings=[None] * size if result.next_stop_strings is None else list(result.next_stop_strings),
        answers=[None] * size if result.answers is None else list(result.answers))
    for name in _FIELDS:
        got = len(getattr(checked, name))
        if got != size:
            raise EnvironmentStepError(f"{where} returned {got} {name} for {size} samples")
    if torch.as_tensor(checked.rewards).dim() != 1:
        raise EnvironmentStepError(f"{where} returned rewards of shape {tuple(torch.as_tensor(checked.rewards).shape)}"
                                   f"; one reward per sample is needed (sum the components of a multi-part reward)")
    return checked


async def step_environment(env: Any, message_log_batch: list, metadata: list, where: str) -> EnvironmentReturn:
    """One `step` of `env`, however it is written; a synchronous one runs off the event loop (it may be slow: a
    verifier, a sandbox)."""
    if is_actor_handle(env):
        result = await RemoteEnvironment(env).step(message_log_batch, metadata)
    elif inspect.iscoroutinefunction(env.step):
        result = await env.step(message_log_batch, metadata)
    else:
        result = await asyncio.to_thread(env.step, message_log_batch, metadata)
        if inspect.isawaitable(result):
            result = await result
    return as_environment_return(result, where, len(message_log_batch))

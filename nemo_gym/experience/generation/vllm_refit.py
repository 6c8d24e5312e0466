"""New weights into one running vLLM server, through its dev-mode endpoints (vLLM 0.32, VLLM_SERVER_DEV_MODE=1):
the paused section every transport shares, and the disk transport's reload.

They sit at the server root, not under /v1:
  POST /pause?mode=keep              freeze the requests in flight (they go on after /resume, on the new weights)
  POST /collective_rpc               {"method": "reload_weights", "kwargs": {"weights_path": DIR}} on every worker
  POST /update_weight_version        {"new_version": "N"}: the label GET /weight_info reports
  POST /reset_prefix_cache           drop cached prefixes; `reset_running_requests=true` also preempts running
                                     requests, which then recompute their keys and values with the new weights
  POST /resume
The collective transports (vllm_collective.py) use vLLM's weight-transfer routes inside the same paused section.
A server without dev mode answers 404 on all of them. Every call is bounded; failures come back as text naming the
step and the failure class, for WeightUpdateError.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from nemo_gym.failures import FailureClass
from nemo_gym.http_client import NO_RETRY, HttpClient, RequestFailed

# /resume and the version check after a load: quick calls, bounded on their own so that a replica is resumed even
# when the load used up the update's timeout.
CONTROL_TIMEOUT_S = 30.0
DEV_MODE_HINT = "start vLLM with VLLM_SERVER_DEV_MODE=1 (local_vllm_model: enable_weight_updates: true)"


def server_root(base_url: str) -> str:
    """The server root of an OpenAI base URL (vLLM's dev endpoints are there, not under /v1)."""
    return base_url.removesuffix("/v1")


def describe_failure(step: str, exc: BaseException) -> str:
    """`<failure class> at <step>: <detail>` for a control call that failed or timed out."""
    if isinstance(exc, RequestFailed):
        hint = f"; {DEV_MODE_HINT}" if exc.status == 404 else ""
        return f"{exc.failure_class} at {step}: {exc.message}{hint}"
    return f"timeout at {step}: no answer in time"


async def call(http: HttpClient, root: str, path: str, body: Any, timeout_s: float, headers: dict[str, str]) -> Any:
    """One control call (GET when `body` is None), never retried."""
    return await http.request_json("GET" if body is None else "POST", f"{root}{path}", body, headers=headers,
                                   timeout_s=timeout_s, retry=NO_RETRY)


class Step:
    """The step an update of one replica is at (for the failure text), the wall time each step took, and whether
    the replica is changing its model now (a failure then may leave it half-loaded)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seconds: dict[str, float] = {}
        self.changing_model = False
        self._since = time.perf_counter()

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[self.name] = self.seconds.get(self.name, 0.0) + now - self._since
        self.name, self._since = name, now


class TransferFailed(Exception):
    """The trainer's side of a transfer failed inside a paused section; the message is the failure text."""


async def paused_update(http: HttpClient, root: str, version: int, timeout_s: float, headers: dict[str, str],
                        body: Callable[[Step], Awaitable[None]], step: Step) -> Optional[str]:
    """Pause `root` (keep), run `body` (the load; it must label the replica `version`), resume; None once the
    replica reports `version`, else why not. `step` records where it is and how long each step took.

    The pause and `body` take at most `timeout_s`. /resume is sent even when they failed, unless the server refused
    the pause itself (then nothing was paused) or they failed while `step.changing_model` (then the replica stays
    paused: generating on a half-loaded model is worse than not generating)."""
    failure: Optional[str] = None
    refused_pause = False
    step.enter("pause")
    try:
        async with asyncio.timeout(timeout_s):
            await call(http, root, "/pause?mode=keep", {}, timeout_s, headers)
            await body(step)
            # Cached prefixes hold keys and values of the old weights. vLLM drops them only when no request holds
            # blocks; with requests frozen by the pause it answers success=false and keeps them: that is what
            # invalidate_kv_cache (reset_running_requests) is for.
            step.enter("reset_prefix_cache")
            await call(http, root, "/reset_prefix_cache", {}, timeout_s, headers)
    except (RequestFailed, TimeoutError, TransferFailed) as exc:
        failure = str(exc) if isinstance(exc, TransferFailed) else describe_failure(step.name, exc)
        if step.changing_model:
            return f"{failure}; the replica is left paused rather than serve a half-loaded model: restart it"
        refused_pause = (step.name == "pause" and isinstance(exc, RequestFailed)
                         and exc.failure_class == FailureClass.HTTP_4XX)
    except asyncio.CancelledError:  # the caller gave up (e.g. Ctrl-C): still try not to leave the replica paused
        try:
            async with asyncio.timeout(CONTROL_TIMEOUT_S):
                await call(http, root, "/resume", {}, CONTROL_TIMEOUT_S, headers)
        except (RequestFailed, TimeoutError):
            pass
        raise
    if refused_pause:
        return failure
    step.enter("resume")
    try:
        async with asyncio.timeout(CONTROL_TIMEOUT_S):
            await call(http, root, "/resume", {}, CONTROL_TIMEOUT_S, headers)
    except (RequestFailed, TimeoutError) as exc:
        return "; ".join(filter(None, [failure, f"{describe_failure('resume', exc)} (generation may stay paused)"]))
    if failure is not None:
        return failure
    step.enter("weight_info")
    try:
        async with asyncio.timeout(CONTROL_TIMEOUT_S):
            reported = (await call(http, root, "/weight_info", None, CONTROL_TIMEOUT_S, headers))["weight_version"]
    except (RequestFailed, TimeoutError) as exc:
        return describe_failure("weight_info", exc)
    except (KeyError, TypeError) as exc:
        return f"invalid_response at weight_info: {type(exc).__name__}: {exc}"
    finally:
        step.enter("done")
    if reported != str(version):
        return f"version_mismatch: the replica reports weight version {reported!r} after the load"
    return None


async def reload_replica(http: HttpClient, root: str, weights_path: str, version: int, timeout_s: float,
                         headers: dict[str, str], step: Step) -> Optional[str]:
    """The disk transport: pause `root` (keep), reload it from the folder `weights_path`, label it `version`,
    resume; None once it reports `version`, else why not (see paused_update)."""

    async def reload(step: Step) -> None:
        step.enter("reload_weights")
        await call(http, root, "/collective_rpc",
                   {"method": "reload_weights", "kwargs": {"weights_path": weights_path}}, timeout_s, headers)
        step.enter("update_weight_version")
        await call(http, root, "/update_weight_version", {"new_version": str(version)}, timeout_s, headers)

    return await paused_update(http, root, version, timeout_s, headers, reload, step)


async def reset_replica_kv(http: HttpClient, root: str, timeout_s: float, headers: dict[str, str]) -> bool:
    """Drop `root`'s cached keys and values, preempting running requests so they recompute theirs; True when vLLM
    reports success. RequestFailed or TimeoutError when it cannot be reached in `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        reply = await call(http, root, "/reset_prefix_cache?reset_running_requests=true", {}, timeout_s, headers)
    return bool(reply["success"])

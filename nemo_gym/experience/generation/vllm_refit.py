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
step, the failure class and what the replica serves now, for WeightUpdateError. Whatever ends an update early (a
failure, a timeout, the caller cancelling it), /resume is sent only while the weights are whole (paused_update).
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from enum import Enum
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


class Weights(Enum):
    """What a replica's model holds during an update, as far as the trainer can tell."""

    OLD = "its old weights"
    PARTIAL = "a half-loaded model"  # a load began and did not finish (or its end is unknown)
    NEW = "the new weights"


# The end of a failure that leaves a replica paused: generating on a half-loaded model is worse than not generating.
LEFT_PAUSED = ("the replica is left paused rather than serve a half-loaded model: restart it (its weight version is "
               "unchanged)")


class Step:
    """Where the update of one replica is (for the failure text), the wall time each step took, what its model
    holds (`weights`, kept current by the transport's load), whether it may be paused now, and where it failed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seconds: dict[str, float] = {}
        self.weights = Weights.OLD
        self.paused = False  # from the /pause request until a /resume succeeds
        self.failed_at: Optional[str] = None
        self.cancelled: Optional[str] = None  # why, and what the replica was left with, once it was cancelled
        self._since = time.perf_counter()

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[self.name] = self.seconds.get(self.name, 0.0) + now - self._since
        self.name, self._since = name, now


class TransferFailed(Exception):
    """The trainer's side of a transfer failed inside a paused section; the message is the failure text."""


def cancelled_reason(step: Step) -> str:
    """What a replica whose update was cancelled at `step` was left with."""
    if step.cancelled is not None:
        return step.cancelled
    left = ("its clean-up did not finish: it may be left paused" if step.paused  # the wait for it gave up
            else f"serving {step.weights.value}")  # cancelled before any pause (a rendezvous, a staged receive)
    return f"cancelled at {step.name}; {left}"


async def _resume(http: HttpClient, root: str, headers: dict[str, str], step: Step) -> Optional[str]:
    """Send /resume, bounded on its own (the load may have used up the update's timeout); None once it answered."""
    try:
        async with asyncio.timeout(CONTROL_TIMEOUT_S):
            await call(http, root, "/resume", {}, CONTROL_TIMEOUT_S, headers)
    except (RequestFailed, TimeoutError) as exc:
        return describe_failure("resume", exc)
    step.paused = False
    return None


async def _leave(http: HttpClient, root: str, headers: dict[str, str], step: Step) -> str:
    """After a failure or a cancel at `step.name`: resume `root` where its weights are whole, and say what it was
    left with."""
    step.failed_at = step.name
    if step.weights is Weights.PARTIAL:
        return LEFT_PAUSED
    if step.paused:
        step.enter("resume")
        failure = await _resume(http, root, headers, step)
        if failure is not None:
            return f"{failure} (generation may stay paused, on {step.weights.value})"
    return f"serving {step.weights.value}"


async def paused_update(http: HttpClient, root: str, version: int, timeout_s: float, headers: dict[str, str],
                        body: Callable[[Step], Awaitable[None]], step: Step) -> Optional[str]:
    """Pause `root` (keep), run `body` (the load: it labels the replica `version` and keeps `step.weights` current),
    drop the prefix cache, resume; None once the replica reports `version`, else why not and what it serves now.
    `step` records where it is and how long each step took.

    The pause, `body` and the cache drop take at most `timeout_s`. However they end, /resume is sent only when the
    weights are whole, the old ones untouched or the new ones loaded: while `step.weights` is PARTIAL the replica
    stays paused, its version unchanged, and the failure says so (LEFT_PAUSED). Nothing is resumed when the server
    refused the pause itself (nothing was paused). A cancelled update (Ctrl-C, the update's own bound) does the same
    before the CancelledError goes on, and leaves why in `step.cancelled`."""
    try:
        step.enter("pause")
        try:
            async with asyncio.timeout(timeout_s):
                step.paused = True  # from the request on: a pause that timed out may still have landed
                await call(http, root, "/pause?mode=keep", {}, timeout_s, headers)
                await body(step)
                # Cached prefixes hold keys and values of the old weights. vLLM drops them only when no request
                # holds blocks; with requests frozen by the pause it answers success=false and keeps them: that is
                # what invalidate_kv_cache (reset_running_requests) is for.
                step.enter("reset_prefix_cache")
                await call(http, root, "/reset_prefix_cache", {}, timeout_s, headers)
        except (RequestFailed, TimeoutError, TransferFailed) as exc:
            failure = str(exc) if isinstance(exc, TransferFailed) else describe_failure(step.name, exc)
            if step.name == "pause" and isinstance(exc, RequestFailed) and exc.failure_class == FailureClass.HTTP_4XX:
                step.paused = False  # refused: nothing was paused
                return failure
            return f"{failure}; {await _leave(http, root, headers, step)}"
        step.enter("resume")
        refused = await _resume(http, root, headers, step)
        if refused is not None:
            step.failed_at = "resume"
            return f"{refused} (generation may stay paused, on the new weights)"
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
    except asyncio.CancelledError:
        where = step.name
        step.cancelled = f"cancelled at {where}; {await _leave(http, root, headers, step)}"
        raise


async def reload_replica(http: HttpClient, root: str, weights_path: str, version: int, timeout_s: float,
                         headers: dict[str, str], step: Step) -> Optional[str]:
    """The disk transport: pause `root` (keep), reload it from the folder `weights_path`, label it `version`,
    resume; None once it reports `version`, else why not (see paused_update)."""

    async def reload(step: Step) -> None:
        step.enter("reload_weights")
        # vLLM reloads in place, tensor by tensor: from the request on, until it answers success, the model may be
        # part new (a reload that failed, timed out or was cancelled may also still be running in vLLM).
        step.weights = Weights.PARTIAL
        await call(http, root, "/collective_rpc",
                   {"method": "reload_weights", "kwargs": {"weights_path": weights_path}}, timeout_s, headers)
        step.weights = Weights.NEW
        step.enter("update_weight_version")
        await call(http, root, "/update_weight_version", {"new_version": str(version)}, timeout_s, headers)

    return await paused_update(http, root, version, timeout_s, headers, reload, step)


async def reset_replica_kv(http: HttpClient, root: str, timeout_s: float, headers: dict[str, str]) -> bool:
    """Drop `root`'s cached keys and values, preempting running requests so they recompute theirs; True when vLLM
    reports success. RequestFailed or TimeoutError when it cannot be reached in `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        reply = await call(http, root, "/reset_prefix_cache?reset_running_requests=true", {}, timeout_s, headers)
    return bool(reply["success"])

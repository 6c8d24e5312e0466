"""The failure taxonomy every caller shares: failure classes, the one failed-request type, the one retry rule.

The HTTP client, the rollout runner and aggregation all classify and retry through this module, so a failure gets
the same class (and the same retry decision) whichever of them met it.
"""

import random
import typing
from dataclasses import dataclass
from typing import Any, Literal

from nemo_gym.errors import DownstreamError

FailureClass = Literal["connect", "timeout", "http_5xx", "http_4xx", "invalid_response", "agent_error",
                       "judge_error", "rate_limited"]
FAILURE_CLASSES: tuple[str, ...] = typing.get_args(FailureClass)
# The judge model of an environment failed or gave no verdict: the rollout itself is done, so it is a failure of its
# verification (kept with the rollout, for ng_reverify_rollouts), never a reward.
JUDGE_ERROR: FailureClass = "judge_error"
# A model endpoint still answered 429 after its model server waited (its Retry-After) and sent the call again.
RATE_LIMITED: FailureClass = "rate_limited"
# Classes a later attempt can fix: the server was away, slow or overloaded.
RETRYABLE_CLASSES: tuple[str, ...] = ("connect", "timeout", "http_5xx", RATE_LIMITED)
TOO_MANY_REQUESTS = 429


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a request that failed for a retryable reason."""

    max_attempts: int = 3
    backoff_base_s: float = 0.2
    backoff_max_s: float = 5.0

    def delay(self, attempt: int) -> float:
        """Full-jitter exponential backoff: spreads retries of many concurrent requests apart."""
        return random.uniform(0, min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))


NO_RETRY = RetryPolicy(max_attempts=1)


class RequestFailed(DownstreamError):
    """A request that failed after its last attempt."""

    def __init__(
        self,
        failure_class: FailureClass,
        message: str,
        *,
        url: str = "",
        status: int | None = None,
        attempts: int = 1,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message
        self.url = url
        self.status = status
        self.attempts = attempts
        self.body = body
        self.headers = headers or {}  # of an HTTP error reply, names in lower case (Retry-After, for one)

    def to_dict(self) -> dict[str, Any]:
        return {
            "failure_class": self.failure_class,
            "message": self.message,
            "status": self.status,
            "attempts": self.attempts,
        }


def failure_class_of(exc: RequestFailed) -> FailureClass:
    """The most specific class: a server's 502 carries the class of the downstream call that failed."""
    if isinstance(exc.body, dict) and isinstance(exc.body.get("error"), dict):
        downstream = exc.body["error"].get("failure_class")
        if downstream in FAILURE_CLASSES:
            return downstream
    return exc.failure_class


def is_retryable(exc: RequestFailed) -> bool:
    """Whether another attempt can succeed: connection failures, timeouts, 5xx and 429, but not a downstream 4xx
    relayed as 502 (a bad request, which no retry fixes)."""
    if exc.status == TOO_MANY_REQUESTS:
        return True
    return exc.failure_class in RETRYABLE_CLASSES and failure_class_of(exc) != "http_4xx"

"""The failure taxonomy every caller shares: failure classes, the one failed-request type, the one retry rule.

The HTTP client, the rollout runner and aggregation all classify and retry through this module, so a failure gets
the same class (and the same retry decision) whichever of them met it.
"""

import random
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, NewType

from nemo_gym.errors import DownstreamError


class FailureClass(StrEnum):
    """Why a request or a rollout failed. The values are a format: failure records, error bodies and metrics carry
    them as these strings."""

    CONNECT = "connect"  # refused, reset, or closed before the reply: a retry may reach a healthy server
    TIMEOUT = "timeout"  # no complete reply within the deadline
    HTTP_5XX = "http_5xx"  # the server answered with an error of its own
    HTTP_4XX = "http_4xx"  # the request was refused: no retry fixes it
    INVALID_RESPONSE = "invalid_response"  # an answer that is not what the protocol promises (malformed, truncated)
    AGENT_ERROR = "agent_error"  # a server's handler raised
    # The judge model of an environment failed or gave no verdict: the rollout itself is done, so it is a failure of
    # its verification (kept with the rollout, for ng_reverify_rollouts), never a reward.
    JUDGE_ERROR = "judge_error"
    # A model endpoint still answered 429 after its model server waited (its Retry-After) and sent the call again.
    RATE_LIMITED = "rate_limited"


# A class an agent declared itself that is not one of ours (NeMo Gym's `_ng_failure_class`: transient, kill_shaped,
# ...): kept as the agent wrote it, and never taken for one of ours.
DeclaredFailureClass = NewType("DeclaredFailureClass", str)

FAILURE_CLASSES: frozenset[str] = frozenset(FailureClass)
# Classes a later attempt can fix: the server was away, slow or overloaded.
RETRYABLE_CLASSES: frozenset[FailureClass] = frozenset({FailureClass.CONNECT, FailureClass.TIMEOUT,
                                                       FailureClass.HTTP_5XX, FailureClass.RATE_LIMITED})
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
        self.failure_class = FailureClass(failure_class)  # a misspelt class fails here, not in a record
        self.message = message
        self.url = url
        self.status = status
        self.attempts = attempts
        self.body = body
        self.headers = headers or {}  # of an HTTP error reply, names in lower case (Retry-After, for one)

    def to_dict(self) -> dict[str, Any]:
        return {
            "failure_class": self.failure_class.value,
            "message": self.message,
            "status": self.status,
            "attempts": self.attempts,
        }


# Where an error body (`{"error": {...}}`) carries an `EndpointRefusal`.
REFUSAL_FIELD = "refusal"


@dataclass(frozen=True)
class EndpointRefusal:
    """A model endpoint's 429 that asked for a longer wait than its model server takes (`max_rate_limit_wait_s`):
    a spent quota as a rule, which nothing within a run gets past. The model server's error body carries it under
    `REFUSAL_FIELD`, every hop relays it (nemo_gym.server.base.downstream_failed), and the collector stops the run
    on it, quoting the endpoint (nemo_gym.rollout_collection.retry_budget)."""

    endpoint: str  # the endpoint's base URL, as `nemo_gym.model_calls.public_endpoint` shows it
    status: int
    code: str  # the endpoint's error code or type ("insufficient_quota"); "" where it gave none
    message: str  # the endpoint's own message
    wait_s: float  # the wait it asked for (Retry-After, or when its rate limits reset)
    max_wait_s: float  # the longest wait its model server takes

    def says(self) -> str:
        """What the endpoint said: `429 insufficient_quota: You exceeded your current quota; the endpoint asks to
        wait 3600 s`."""
        code = f" {self.code}" if self.code else ""
        return f"{self.status}{code}: {self.message.rstrip('.')}; the endpoint asks to wait {self.wait_s:.0f} s"

    def line(self) -> str:
        """One line for a person: which endpoint, what it said, and why it was not waited out."""
        return (f"model endpoint {self.endpoint} answered {self.says()}, longer than its model server waits "
                f"(max_rate_limit_wait_s={self.max_wait_s:g})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "EndpointRefusal | None":
        """The refusal `data` holds, or None when it is not one."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(str(data["endpoint"]), int(data["status"]), str(data["code"]), str(data["message"]),
                       float(data["wait_s"]), float(data["max_wait_s"]))
        except (KeyError, TypeError, ValueError):
            return None


def refusal_of(exc: RequestFailed) -> EndpointRefusal | None:
    """The endpoint refusal a failed request's error body carries, if any."""
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    return EndpointRefusal.from_dict(error.get(REFUSAL_FIELD)) if isinstance(error, dict) else None


def declared_failure_class(name: str) -> FailureClass | DeclaredFailureClass:
    """The class a failure body or an agent's marker names: one of ours when it is one, else kept as declared."""
    return FailureClass(name) if name in FAILURE_CLASSES else DeclaredFailureClass(name)


def failure_class_of(exc: RequestFailed) -> FailureClass:
    """The most specific class: a server's 502 carries the class of the downstream call that failed."""
    if isinstance(exc.body, dict) and isinstance(exc.body.get("error"), dict):
        downstream = exc.body["error"].get("failure_class")
        if isinstance(downstream, str) and downstream in FAILURE_CLASSES:
            return FailureClass(downstream)
    return exc.failure_class


def is_retryable(exc: RequestFailed) -> bool:
    """Whether another attempt can succeed: connection failures, timeouts, 5xx and 429, but not a downstream 4xx
    relayed as 502 (a bad request, which no retry fixes)."""
    if exc.status == TOO_MANY_REQUESTS:
        return True
    return exc.failure_class in RETRYABLE_CLASSES and failure_class_of(exc) != FailureClass.HTTP_4XX

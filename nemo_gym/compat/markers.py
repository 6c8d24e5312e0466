"""NeMo Gym 0.4.0 agents' failure markers on a `/run` reply.

An agent that could not finish a rollout may still answer 200 with a verify-shaped body (reward 0) carrying
`_ng_failure_class` (e.g. `transient`, `legitimate`, `timeout_exceeded`, `skipped`, `kill_shaped`) and, for rollouts
killed from outside, `_ng_no_persist: true`. NeMo Gym's collector writes the first to its failures file and the
second nowhere (so a resume runs it again); neither is a success. Here both are a failure of that class, which goes
to the failures file and is retried on resume, and never scored.
"""

from dataclasses import dataclass
from typing import Any

from nemo_gym.failures import DeclaredFailureClass, FailureClass, declared_failure_class

FAILURE_CLASS_KEY = "_ng_failure_class"
NO_PERSIST_KEY = "_ng_no_persist"
KILL_SHAPED = "kill_shaped"  # NeMo Gym's class for rollouts killed from outside, the only one marked no-persist
ERROR_MESSAGE_KEY = "error_message"  # what went wrong, beside the marker


@dataclass(frozen=True)
class MarkedFailure:
    failure_class: FailureClass | DeclaredFailureClass
    message: str


def marked_failure(reply: Any) -> MarkedFailure | None:
    """The failure an agent's reply declares, or None for an ordinary result."""
    if not isinstance(reply, dict):
        return None
    declared = reply.get(FAILURE_CLASS_KEY)
    if declared in (None, "") and not reply.get(NO_PERSIST_KEY):
        return None
    failure_class = declared_failure_class(str(declared) if declared not in (None, "") else KILL_SHAPED)
    detail = reply.get(ERROR_MESSAGE_KEY)
    message = f"the agent marked the rollout failed ({FAILURE_CLASS_KEY}={failure_class})"
    return MarkedFailure(failure_class, f"{message}: {detail}" if detail else message)

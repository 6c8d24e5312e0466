"""One rollout, from a row to an outcome: the attempt, timeout and failure-class rules every caller shares.

`ng_collect_rollouts` (the Runner) and the Python API (`RolloutCollectionHelper.run_examples`) both call
`run_rollout`, so a row is retried, timed out and classified the same way whichever of them runs it. A retryable
failure (`nemo_gym.failures.is_retryable`, the rule the HTTP client and aggregation use too) is retried with jittered
exponential backoff up to the attempt budget;
anything else, or a retryable failure that used up its attempts, is a `RolloutFailure` — never a reward. A model
endpoint's refusal (a 429 asking for a longer wait than its model server takes: nemo_gym.failures.EndpointRefusal) is
not retried: no attempt gets past it before the wait it asked for. Under a run-wide `RetryBudget`
(ng_collect_rollouts), every attempt is admitted and recorded there (a refusal with it, which may stop the run), and a
retry it has no room for is not made.
"""

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from nemo_gym.compat.markers import marked_failure
from nemo_gym.errors import RolloutFailedError
from nemo_gym.failures import (
    DeclaredFailureClass, EndpointRefusal, FailureClass, RequestFailed, RetryPolicy, failure_class_of, is_retryable,
    refusal_of,
)
from nemo_gym.http_client import HttpClient
from nemo_gym.rollout_collection.config import SharedRolloutCollectionConfig
from nemo_gym.rollout_collection.retry_budget import RetryBudget
from nemo_gym.run_files.rows import keyed
from nemo_gym.run_format import AGENT_REF, ROLLOUT_INDEX, TASK_INDEX
from nemo_gym.traces import names as span_names, switch as traces

_BACKOFF_MAX_S = 60.0

# The CLI's defaults, read from its config so the Python API cannot drift from them.
_DEFAULTS = SharedRolloutCollectionConfig.model_fields


@dataclass(frozen=True)
class RolloutPolicy:
    """How patiently one rollout is run: attempts within one call, the deadline of one attempt, backoff base."""

    max_attempts: int = _DEFAULTS["max_attempts"].default
    rollout_timeout_s: float = _DEFAULTS["rollout_timeout_s"].default
    retry_backoff_s: float = _DEFAULTS["retry_backoff_s"].default

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.rollout_timeout_s <= 0:
            raise ValueError(f"rollout_timeout_s must be positive, got {self.rollout_timeout_s}")
        if self.retry_backoff_s < 0:
            raise ValueError(f"retry_backoff_s must not be negative, got {self.retry_backoff_s}")

    @classmethod
    def from_config(cls, config: SharedRolloutCollectionConfig) -> "RolloutPolicy":
        return cls(config.max_attempts, config.rollout_timeout_s, config.retry_backoff_s)

    def backoff_s(self, attempt: int) -> float:
        """The pause after failed attempt number `attempt` (1-based)."""
        return RetryPolicy(backoff_base_s=self.retry_backoff_s, backoff_max_s=_BACKOFF_MAX_S).delay(attempt)


@dataclass(frozen=True)
class RolloutSuccess:
    reply: dict[str, Any]  # the agent's /run answer, as it came
    reward: float
    attempts: int


@dataclass(frozen=True)
class RolloutFailure:
    """A rollout that still failed after its attempts (or failed in a way no retry fixes)."""

    failure_class: FailureClass | DeclaredFailureClass  # or an agent's own marker (see nemo_gym.compat.markers)
    attempts: int  # attempts this call made
    last_error: str
    http_status: int | None
    url: str
    task_index: int | None  # the row's _ng_task_index / _ng_rollout_index, when it has them
    rollout_index: int | None
    # A failed verification (a marked reply holding the rollout's `response`): the reply, kept for re-verification.
    reply: dict[str, Any] | None = None
    refusal: EndpointRefusal | None = None  # a model endpoint's refusal to serve within its model server's wait

    def error(self) -> RolloutFailedError:
        return RolloutFailedError(
            failure_class=self.failure_class, attempts=self.attempts, last_error=self.last_error,
            http_status=self.http_status, url=self.url, task_index=self.task_index,
            rollout_index=self.rollout_index,
        )


def _reward(reply: Any, url: str) -> float:
    reward = reply.get("reward") if isinstance(reply, dict) else None
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        got = f"reward={reward!r}" if isinstance(reply, dict) else f"a {type(reply).__name__}"
        raise RequestFailed(FailureClass.INVALID_RESPONSE, f"{url} answered without a finite numeric reward ({got})",
                            url=url)
    return float(reward)


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


async def run_rollout(http: HttpClient, url: str, row: dict[str, Any], policy: RolloutPolicy,
                      attempts: int | None = None, run_budget: RetryBudget | None = None
                      ) -> RolloutSuccess | RolloutFailure:
    """POST `row` to the agent's `url` (its /run) until it succeeds or the budget is spent.

    `attempts` caps this call below `policy.max_attempts` (the CLI's attempts left across resumed runs). `http`
    must not retry by itself (an HttpClient makes one attempt unless asked): the attempts are counted here. With
    traces on, the rollout is a span, each attempt's /run its child, each failed attempt an event on it.
    """
    tracing = traces.ACTIVE
    if tracing is None:
        return await _run_attempts(http, url, row, policy, attempts, run_budget)
    with tracing.span(f"rollout {_agent_name(row)}", _row_attributes(row)) as span:
        outcome = await _run_attempts(http, url, row, policy, attempts, run_budget)
        span.set_attribute(span_names.ATTEMPTS, outcome.attempts)
        if isinstance(outcome, RolloutSuccess):
            span.set_attribute(span_names.REWARD, outcome.reward)
        else:
            tracing.failed(span, str(outcome.failure_class))
        return outcome


def _agent_name(row: dict[str, Any]) -> str:
    agent = row.get(AGENT_REF)
    return str(agent.get("name", "")) if isinstance(agent, dict) else ""


def _row_attributes(row: dict[str, Any]) -> dict[str, str | int]:
    found: dict[str, str | int] = {span_names.AGENT_NAME: _agent_name(row)}
    for name, key in ((span_names.TASK_INDEX, TASK_INDEX), (span_names.ROLLOUT_INDEX, ROLLOUT_INDEX)):
        if (index := _int_or_none(row.get(key))) is not None:
            found[name] = index
    return found


async def _run_attempts(http: HttpClient, url: str, row: dict[str, Any], policy: RolloutPolicy,
                        attempts: int | None, run_budget: RetryBudget | None) -> RolloutSuccess | RolloutFailure:
    budget = policy.max_attempts if attempts is None else min(attempts, policy.max_attempts)
    attempt = 0
    epoch = await run_budget.admit(retry=False) if run_budget else None
    while True:
        attempt += 1
        try:
            async with asyncio.timeout(policy.rollout_timeout_s):
                reply = await http.post_json(url, row)
            marked = marked_failure(reply)
            if marked is not None:  # declared by the agent, so no retry here; a resume runs it again
                if run_budget and epoch is not None:
                    run_budget.record(epoch, str(marked.failure_class), marked.message)
                verified = reply if isinstance(reply.get("response"), dict) else None
                return RolloutFailure(marked.failure_class, attempt, marked.message, None, url,
                                      _int_or_none(row.get(TASK_INDEX)), _int_or_none(row.get(ROLLOUT_INDEX)),
                                      verified)
            success = RolloutSuccess(reply, _reward(reply, url), attempt)
            if run_budget and epoch is not None:
                run_budget.record(epoch, None)
            return success
        except TimeoutError:
            error = RequestFailed(
                FailureClass.TIMEOUT, f"rollout exceeded rollout_timeout_s={policy.rollout_timeout_s:g} at {url}",
                url=url
            )
        except RequestFailed as exc:
            error = exc
        refusal = refusal_of(error)
        message = refusal.line() if refusal is not None else error.message
        failure = RolloutFailure(failure_class_of(error), attempt, message, error.status, url,
                                 _int_or_none(row.get(TASK_INDEX)), _int_or_none(row.get(ROLLOUT_INDEX)),
                                 refusal=refusal)
        if run_budget and epoch is not None:
            run_budget.record(epoch, failure.failure_class, message, refusal)
        if (tracing := traces.ACTIVE) is not None:
            tracing.event(span_names.ATTEMPT_FAILED, {span_names.ATTEMPT: attempt,
                                                      span_names.ERROR_TYPE: str(failure.failure_class)})
        if attempt >= budget or not is_retryable(error) or refusal is not None:
            return failure
        await asyncio.sleep(policy.backoff_s(attempt))
        if run_budget:
            epoch = await run_budget.admit(retry=True)
            if epoch is None:  # the run's retries are spent: recorded as failed, a resume runs it again
                return failure


def result_row(row: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """The rollout as the output file holds it: the agent's reply with the row's keys (first) and agent_ref."""
    task, rollout = _int_or_none(row.get(TASK_INDEX)), _int_or_none(row.get(ROLLOUT_INDEX))
    out = keyed(task, rollout, reply) if task is not None and rollout is not None else dict(reply)
    out[AGENT_REF] = row[AGENT_REF]
    return out

"""A model server's generation requests to its endpoint: paced by the endpoint's rate limits (configured, or learned
from its 429s: rate_limits.py), sent again after a 429 (once the wait its Retry-After asks for is over, for every
worker), and measured into a per-call record.

A 429 is the endpoint's flow control, not a failure of the rollout: the model server that holds the limits waits
and sends the same request again, at most `max_rate_limited_attempts` times, instead of failing the call and making
the collector run the whole rollout again. Anything else fails at once, as every server's calls do
(docs/architecture.md, "Retry budget"); a call still refused after its attempts fails as `rate_limited`, with what
the endpoint said (its error code and message).

Two waits are never taken, and the call fails as `rate_limited` instead:
- A 429 that asks for a wait longer than `max_rate_limit_wait_s` (its Retry-After, else when the rate limits it names
  reset: `x-ratelimit-reset-requests`, `-tokens`): a spent quota as a rule ("insufficient_quota", wait an hour).
  Nobody is paused for it; the error body carries the endpoint's refusal (nemo_gym.failures.EndpointRefusal), on
  which the collector stops the run and quotes the endpoint.
- A turn under the rate limits (or a Retry-After pause) that would come when less than `_MIN_TIME_LEFT` of the
  call's timeout is left: the request is not sent, rather than sent, billed and timed out.

The collector learns of 429s as they come, not once a rollout ends (a call may wait out several, or fail on one):
the limiter counts every 429 in the memory the server's workers share, and `GET /rate_limited` answers the count
(`RATE_LIMITED_PATH`), which the collector reads for its progress line (rollout_collection/model_server_stats.py).
"""

import email.utils
import math
import random
import re
import time
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.config.model_servers import EndpointLimitSettings
from nemo_gym.failures import REFUSAL_FIELD, TOO_MANY_REQUESTS, EndpointRefusal, FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient, bearer_token
from nemo_gym.model_calls import ModelCall, public_endpoint, usage_counts
from nemo_gym.responses_api_models.rate_limits import Budgets, EndpointLimiter, PastDeadline, shared_limiter
from nemo_gym.responses_api_models.stats_paths import RATE_LIMITED_PATH
from nemo_gym.server.base import HandlerError, json_route

# Without a Retry-After: wait this long after the first 429, doubling (with jitter) after each further one.
_BACKOFF_BASE_S = 1.0
_BACKOFF_MAX_S = 60.0
_MAX_TOKEN_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_BYTES_PER_TOKEN = 4.0  # a prompt's tokens from its request's size, until the endpoint's own counts calibrate it
_CALIBRATION_WEIGHT = 0.1  # how much each reported prompt moves the calibration
# A request goes out only with at least this share of its timeout left for the answer.
_MIN_TIME_LEFT = 0.1
# When the rate limits a 429 names are whole again (OpenAI's, as "1s", "6m0s", "20ms").
_RESET_HEADERS = ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_SAID_CHARS = 300  # of an endpoint's own error message



def retry_after_s(exc: RequestFailed) -> float | None:
    """The wait a 429 (or 503) reply asks for: `retry-after-ms`, else `Retry-After` in seconds or as an HTTP date."""
    headers = exc.headers
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (ValueError, TypeError):  # neither seconds nor an HTTP date: no wait asked for
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _duration_s(value: str) -> float | None:
    """Seconds of `30`, `1s`, `6m0s`, `1h2m3.5s` or `20ms`; None for anything else."""
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION_PART.findall(value)
        if not parts or "".join(number + unit for number, unit in parts) != value:
            return None
        seconds = sum(float(number) * _UNIT_S[unit] for number, unit in parts)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def requested_wait_s(exc: RequestFailed) -> float | None:
    """The wait a 429 asks for: its Retry-After (`retry_after_s`), else the latest reset of the rate limits it names;
    None when it says neither."""
    retry_after = retry_after_s(exc)
    if retry_after is not None:
        return retry_after
    resets = [_duration_s(exc.headers[name]) for name in _RESET_HEADERS if name in exc.headers]
    known = [reset for reset in resets if reset is not None]
    return max(known) if known else None


def endpoint_said(body: Any, secret: str | None = None) -> tuple[str, str]:
    """(code, message) of an endpoint's error body: OpenAI's `{"error": {"code" or "type", "message"}}`, Gemini's
    `"status"`, Anthropic's `"type"`, or the text of a body that is not JSON; `secret` never appears in them."""
    error = body.get("error") if isinstance(body, dict) else None
    code, message = "", str(error or body or "")
    if isinstance(error, dict):
        named = [error.get(key) for key in ("code", "status", "type")]
        code = next((name for name in named if isinstance(name, str) and name), "")
        message = str(error.get("message") or "")
    message = " ".join(message.split())
    if secret:
        code, message = code.replace(secret, "***"), message.replace(secret, "***")
    return code, message[:_SAID_CHARS]


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in _MAX_TOKEN_KEYS:
        value = body.get(key)
        if type(value) is int:
            return value
    return None


@dataclass(frozen=True)
class _Charge:
    """What a request was charged against the token budget before it was sent."""

    size: int  # the request's size in bytes
    prompt: float  # its prompt's tokens, estimated
    output: float  # the output tokens it reserved: its maximum (what OpenAI charges on arrival), or the typical one

    @property
    def tokens(self) -> int:
        return int(self.prompt + self.output)

    def shortfall(self, input_tokens: int | None, output_tokens: int | None) -> int:
        """The tokens the endpoint reported beyond this charge (a prompt estimated short, a longer output); a charge
        that was too high is not given back, as an endpoint that charges the maximum when the request arrives keeps
        it too."""
        return int(max(0.0, (input_tokens or 0) - self.prompt) + max(0.0, (output_tokens or 0) - self.output))


@dataclass
class _TokenEstimate:
    """A request's tokens before it is sent: its prompt from the request's size (bytes per token calibrated by the
    prompt tokens the endpoint reports), and the mean output so far for a request that sets no maximum."""

    bytes_per_token: float = _BYTES_PER_TOKEN
    output_total: int = 0
    outputs: int = 0

    def charge(self, body: dict[str, Any]) -> _Charge:
        size = len(orjson.dumps(body))
        maximum = _max_tokens(body)
        typical = self.output_total / self.outputs if self.outputs else 0.0
        return _Charge(size, size / self.bytes_per_token, float(maximum) if maximum is not None else typical)

    def learn(self, charge: _Charge, input_tokens: int | None, output_tokens: int | None) -> None:
        if input_tokens:
            self.bytes_per_token += _CALIBRATION_WEIGHT * (charge.size / input_tokens - self.bytes_per_token)
        if output_tokens is not None:
            self.output_total += output_tokens
            self.outputs += 1


class EndpointCalls:
    """The generation requests of one model server; each returns the endpoint's reply and the call's record."""

    def __init__(self, limiter: EndpointLimiter, *, max_rate_limited_attempts: int,
                 max_rate_limit_wait_s: float) -> None:
        self.limiter = limiter
        self.max_rate_limited_attempts = max_rate_limited_attempts
        self.max_rate_limit_wait_s = max_rate_limit_wait_s
        self._tokens = _TokenEstimate()

    @classmethod
    def of_server(cls, server: str, settings: EndpointLimitSettings) -> "EndpointCalls":
        """The calls of model server `server`, under the limiter its worker processes share."""
        budgets = Budgets(settings.max_requests_per_minute, settings.max_tokens_per_minute)
        return cls(shared_limiter(server, budgets), max_rate_limited_attempts=settings.max_rate_limited_attempts,
                   max_rate_limit_wait_s=settings.max_rate_limit_wait_s)

    def route(self) -> Route:
        """`GET RATE_LIMITED_PATH`: the 429s this server's endpoint answered (see the module docstring)."""
        return json_route(RATE_LIMITED_PATH, self._rate_limited, methods=("GET",))

    async def _rate_limited(self, body: Any, request: Request) -> dict[str, int]:
        return {"rate_limited": self.limiter.rate_limited_count()}

    async def post(self, http: HttpClient, url: str, body: dict[str, Any], *, base_url: str, model: str,
                   headers: dict[str, str], timeout_s: float) -> tuple[Any, ModelCall]:
        """POST `body` to `url` (under `base_url`) through `http`; the reply and the record of the call."""
        started_at, started = time.time(), time.monotonic()
        deadline = started + timeout_s * (1 - _MIN_TIME_LEFT)  # the latest a request of this call is sent
        charge = self._tokens.charge(body) if self.limiter.counts_tokens else None
        tokens = charge.tokens if charge else 0
        waited, attempts, limited = 0.0, 0, 0
        said = ""  # what the endpoint's last 429 said
        while True:
            try:
                waited += await self.limiter.acquire(tokens, deadline)
            except PastDeadline as late:
                after = f" after {attempts} attempt(s) answered 429: {said}" if attempts else ""
                raise HandlerError(TOO_MANY_REQUESTS, f"{public_endpoint(base_url)}: not sent{after}; its turn "
                                   f"under the rate limits comes in {late.wait_s:.1f} s, with less than "
                                   f"{_MIN_TIME_LEFT:.0%} of request_timeout_s={timeout_s:g} left",
                                   FailureClass.RATE_LIMITED) from None
            attempts += 1
            sent = time.monotonic()
            try:
                reply = await http.post_json(url, body, headers=headers, timeout_s=started + timeout_s - sent)
                break
            except RequestFailed as exc:
                if exc.status != TOO_MANY_REQUESTS:
                    raise
                limited += 1
                code, message = endpoint_said(exc.body, bearer_token(headers))
                said = f"429 {code}: {message}" if code else f"429: {message}"
                asked = requested_wait_s(exc)
                if asked is not None and asked > self.max_rate_limit_wait_s:
                    self.limiter.refused()
                    refusal = EndpointRefusal(public_endpoint(base_url), TOO_MANY_REQUESTS, code, message, asked,
                                              self.max_rate_limit_wait_s)
                    raise HandlerError(TOO_MANY_REQUESTS, refusal.line(), FailureClass.RATE_LIMITED,
                                       **{REFUSAL_FIELD: refusal.to_dict()}) from None
                pause = asked if asked is not None else \
                    random.uniform(0.5, 1.0) * min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2 ** (limited - 1))
                self.limiter.limited(pause)
                if attempts >= self.max_rate_limited_attempts:
                    raise HandlerError(TOO_MANY_REQUESTS, f"{public_endpoint(base_url)} still answered 429 after "
                                       f"{attempts} attempt(s) over {time.monotonic() - started:.1f} s: {said}",
                                       FailureClass.RATE_LIMITED) from None
        latency = time.monotonic() - sent
        counts = usage_counts(reply.get("usage") if isinstance(reply, dict) else None)
        shortfall = 0
        if charge is not None:
            self._tokens.learn(charge, counts["input_tokens"], counts["output_tokens"])
            shortfall = charge.shortfall(counts["input_tokens"], counts["output_tokens"])
        self.limiter.answered(shortfall)
        record = ModelCall(endpoint=public_endpoint(base_url), model=model, started_at=started_at,
                           latency_s=round(latency, 6), wait_s=round(waited, 6), attempts=attempts,
                           rate_limited=limited, failure_class=FailureClass.RATE_LIMITED if limited else None, **counts)
        return reply, record

"""A model server's generation requests to its endpoint: paced by the endpoint's rate limits (configured, or learned
from its 429s: rate_limits.py), sent again after a 429 (once the wait its Retry-After asks for is over, for every
worker), and measured into a per-call record.

A 429 is the endpoint's flow control, not a failure of the rollout: the model server that holds the limits waits
and sends the same request again, at most `max_rate_limited_attempts` times, instead of failing the call and making
the collector run the whole rollout again. Anything else fails at once, as every server's calls do
(docs/architecture.md, "Retry budget"); a call still refused after its attempts fails as `rate_limited`.
"""

import email.utils
import math
import random
import time
from dataclasses import dataclass
from typing import Any

import orjson

from nemo_gym.failures import TOO_MANY_REQUESTS, FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.model_calls import ModelCall, public_endpoint, usage_counts
from nemo_gym.responses_api_models.rate_limits import EndpointLimiter
from nemo_gym.server.base import HandlerError

# Without a Retry-After: wait this long after the first 429, doubling (with jitter) after each further one.
_BACKOFF_BASE_S = 1.0
_BACKOFF_MAX_S = 60.0
_MAX_TOKEN_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_BYTES_PER_TOKEN = 4.0  # a prompt's tokens from its request's size, until the endpoint's own counts calibrate it
_CALIBRATION_WEIGHT = 0.1  # how much each reported prompt moves the calibration


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


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in _MAX_TOKEN_KEYS:
        value = body.get(key)
        if type(value) is int:
            return value
    return None


@dataclass
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

    def __init__(self, limiter: EndpointLimiter, *, max_rate_limited_attempts: int) -> None:
        self.limiter = limiter
        self.max_rate_limited_attempts = max_rate_limited_attempts
        self._tokens = _TokenEstimate()

    async def post(self, http: HttpClient, url: str, body: dict[str, Any], *, base_url: str, model: str,
                   headers: dict[str, str], timeout_s: float) -> tuple[Any, ModelCall]:
        """POST `body` to `url` (under `base_url`) through `http`; the reply and the record of the call."""
        started_at, started = time.time(), time.monotonic()
        charge = self._tokens.charge(body) if self.limiter.counts_tokens else None
        tokens = charge.tokens if charge else 0
        waited, attempts, limited = 0.0, 0, 0
        while True:
            waited += await self.limiter.acquire(tokens)
            attempts += 1
            sent = time.monotonic()
            try:
                reply = await http.post_json(url, body, headers=headers,
                                             timeout_s=max(timeout_s - (sent - started), 0.001))
                break
            except RequestFailed as exc:
                if exc.status != TOO_MANY_REQUESTS:
                    raise
                limited += 1
                pause = retry_after_s(exc)
                if pause is None:
                    pause = random.uniform(0.5, 1.0) * min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2 ** (limited - 1))
                self.limiter.limited(pause)
                spent = time.monotonic() - started
                if attempts >= self.max_rate_limited_attempts or spent + pause >= timeout_s:
                    raise HandlerError(TOO_MANY_REQUESTS, f"{public_endpoint(base_url)} still answered 429 after "
                                       f"{attempts} attempt(s) over {spent:.1f} s: {exc.message}",
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

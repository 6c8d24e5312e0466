"""The preflight of a model endpoint: is it reachable, is the key accepted, is the model served, how long a context.

One `GET <base_url>/models` with the server's key answers all four on vLLM, OpenAI and most gateways (vLLM reports
`max_model_len` there). An endpoint without that route is asked one chat completion of one token instead. Model
servers answer `GET /preflight` with the checks of their endpoints; ng_collect_rollouts asks each model server
before its first rollout, and ng_e2e_collect_rollouts checks the endpoints of its config before it starts a server
(nemo_gym.rollout_collection.preflight). Nothing here ever shows the key: an endpoint's error text is cleaned of it.
"""

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from nemo_gym.failures import RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.model_calls import public_endpoint

PREFLIGHT_PATH = "/preflight"
PREFLIGHT_TIMEOUT_S = 5.0
_SHOWN_MODELS = 8
_DETAIL_CHARS = 200
# Where /models entries report their context length: vLLM's name first, then the names gateways use.
_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")

# What was wrong; None when the endpoint is fine.
UNREACHABLE = "unreachable"
KEY_REJECTED = "key_rejected"
MODEL_NOT_SERVED = "model_not_served"
ENDPOINT_ERROR = "endpoint_error"


@dataclass
class EndpointCheck:
    server: str  # the model server that calls the endpoint
    endpoint: str  # its base URL, as `public_endpoint` shows it
    model: str
    problem: str | None = None
    detail: str = ""
    context_length: int | None = None
    served: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EndpointCheck":
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})

    def line(self) -> str:
        """One line for a person: what was found."""
        where = f"model endpoint {self.endpoint} (model server '{self.server}')"
        if self.problem == UNREACHABLE:
            return f"{where} is unreachable: {self.detail}"
        if self.problem == KEY_REJECTED:
            return f"{where} rejected the API key: {self.detail}"
        if self.problem == MODEL_NOT_SERVED:
            served = f" (it serves: {', '.join(self.served)})" if self.served else ""
            return f"{where} does not serve model '{self.model}'{served}: {self.detail}"
        if self.problem is not None:
            return f"{where} failed its check: {self.detail}"
        context = f", context {self.context_length} tokens" if self.context_length else ""
        return f"{where} serves '{self.model}'{context} (checked in {self.seconds:.2f} s)"


def _clean(text: str, secret: str | None) -> str:
    text = " ".join(text.split())
    if secret:
        text = text.replace(secret, "***")
    return text[:_DETAIL_CHARS]


def _context_length(entry: dict[str, Any]) -> int | None:
    for key in _CONTEXT_KEYS:
        value = entry.get(key)
        if type(value) is int and value > 0:
            return value
    return None


def _failed(check: EndpointCheck, exc: RequestFailed, api_key: str | None) -> EndpointCheck:
    detail = exc.message if exc.status is None else f"HTTP {exc.status}: {exc.body}"
    check.detail = _clean(str(detail), api_key)
    if exc.status is None:
        check.problem = UNREACHABLE
    elif exc.status in (401, 403):
        check.problem = KEY_REJECTED
    elif exc.status == 404 or (exc.status == 400 and "model" in check.detail.lower()):
        check.problem = MODEL_NOT_SERVED
    else:
        check.problem = ENDPOINT_ERROR
    return check


async def _probe_generation(http: HttpClient, check: EndpointCheck, base_url: str, headers: dict[str, str],
                            api_key: str | None, timeout_s: float) -> EndpointCheck:
    """For an endpoint without /models: one chat completion of one token tells the key and the model apart."""
    body = {"model": check.model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    try:
        await http.post_json(f"{base_url}/chat/completions", body, headers=headers, timeout_s=timeout_s)
    except RequestFailed as exc:
        return _failed(check, exc, api_key)
    return check


async def check_endpoint(http: HttpClient, server: str, base_url: str, api_key: str | None, model: str,
                         timeout_s: float = PREFLIGHT_TIMEOUT_S) -> EndpointCheck:
    """What `GET <base_url>/models` says of the endpoint, `model` and `api_key`, within `timeout_s`."""
    started = time.monotonic()
    base_url = base_url.rstrip("/")
    check = EndpointCheck(server, public_endpoint(base_url), model)
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with asyncio.timeout(timeout_s):
            try:
                listing = await http.get_json(f"{base_url}/models", headers=headers, timeout_s=timeout_s)
            except RequestFailed as exc:
                if exc.status in (404, 405):
                    await _probe_generation(http, check, base_url, headers, api_key, timeout_s)
                else:
                    _failed(check, exc, api_key)
            else:
                _read_listing(check, listing)
    except TimeoutError:
        check.problem, check.detail = UNREACHABLE, f"no answer within {timeout_s:g} s"
    check.seconds = round(time.monotonic() - started, 3)
    return check


def _read_listing(check: EndpointCheck, listing: Any) -> None:
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        check.problem, check.detail = ENDPOINT_ERROR, "GET /models answered without a 'data' list"
        return
    models = {str(entry.get("id")): entry for entry in entries if isinstance(entry, dict)}
    if not check.model:  # no name configured: the endpoint's own default is used
        return
    if check.model not in models:
        check.problem = MODEL_NOT_SERVED
        check.served = sorted(models)[:_SHOWN_MODELS]
        check.detail = f"GET /models lists {len(models)} model(s)"
        return
    check.context_length = _context_length(models[check.model])

"""The preflight of a model endpoint: is it reachable, is the key accepted, is the model served, how long a context.

One `GET <base_url>/models` with the server's key answers all four on vLLM, OpenAI and most gateways (vLLM reports
`max_model_len` there). It sends no generation request, so it costs nothing and shows in no count. Only what a rerun
cannot fix refuses the run: no connection (or no answer in time), 401/403, a model list without the model. Any other
answer (no /models route, an overloaded 503) shows the endpoint is there; the run goes on and says what went
unchecked, and a failing endpoint is then the run-wide retry budget's to handle. Model servers answer `GET /preflight` with the checks of their endpoints; ng_collect_rollouts asks each model server
before its first rollout, and ng_e2e_collect_rollouts checks the endpoints of its config before it starts a server
(nemo_gym.rollout_collection.preflight). Nothing here ever shows the key: an endpoint's error text is cleaned of it.
"""

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from nemo_gym.failures import RequestFailed
from nemo_gym.http_client import HttpClient, bearer_headers
from nemo_gym.model_calls import public_endpoint

PREFLIGHT_PATH = "/preflight"
PREFLIGHT_TIMEOUT_S = 5.0
_SHOWN_MODELS = 8
_DETAIL_CHARS = 200
# Where /models entries report their context length: vLLM's name first, then the names gateways use.
_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")

# What was wrong; None when the endpoint is fine (`detail` may still say what went unchecked).
UNREACHABLE = "unreachable"
KEY_REJECTED = "key_rejected"
MODEL_NOT_SERVED = "model_not_served"


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
        if self.detail:
            return f"{where} is reachable; key and model unchecked ({self.detail})"
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


def _failed(check: EndpointCheck, exc: RequestFailed, api_key: str | None) -> None:
    if exc.status is None:
        check.problem, check.detail = UNREACHABLE, _clean(exc.message, api_key)
        return
    check.detail = _clean(f"GET /models answered HTTP {exc.status}: {exc.body}", api_key)
    if exc.status in (401, 403):
        check.problem = KEY_REJECTED


async def check_endpoint(http: HttpClient, server: str, base_url: str, api_key: str | None, model: str,
                         timeout_s: float = PREFLIGHT_TIMEOUT_S) -> EndpointCheck:
    """What `GET <base_url>/models` says of the endpoint, `model` and `api_key`, within `timeout_s`."""
    started = time.monotonic()
    base_url = base_url.rstrip("/")
    check = EndpointCheck(server, public_endpoint(base_url), model)
    headers = bearer_headers(api_key)
    try:
        async with asyncio.timeout(timeout_s):
            try:
                listing = await http.get_json(f"{base_url}/models", headers=headers, timeout_s=timeout_s)
            except RequestFailed as exc:
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
        check.detail = "GET /models answered without a 'data' list"
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

"""`POST /v1/responses` passed through to an OpenAI-compatible endpoint (OpenAI itself, or a gateway).

Settings: `base_url` (ending in /v1), `api_key` (sent as a bearer token; launch scrubs it from every log line),
`model`, `request_timeout_s` (default: `config.timeouts.MODEL_REQUEST_TIMEOUT_S`), and the endpoint's rate limits
(`max_requests_per_minute`, `max_tokens_per_minute`, `max_rate_limited_attempts`, `max_rate_limit_wait_s`:
see ../endpoint_calls.py), held by this server as a whole.

Requests go through `EndpointCalls` (paced, re-sent after a 429, measured); a Responses reply carries the call's
record under `nemo_gym.model_calls.REPLY_FIELD`. `GET /preflight` checks the endpoint, the key and the model;
`GET /rate_limited` counts the 429s it answered (../endpoint_calls.py).
"""

from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.routing import Route

from nemo_gym import protocol
from nemo_gym.config.model_servers import EndpointLimitSettings
from nemo_gym.config.servers import ServerSpec
from nemo_gym.config.timeouts import MODEL_REQUEST_TIMEOUT_S
from nemo_gym.config.typed import Text
from nemo_gym.http_client import bearer_headers
from nemo_gym.model_calls import REPLY_FIELD, ModelCall
from nemo_gym.responses_api_models.endpoint_calls import EndpointCalls
from nemo_gym.responses_api_models.replay import Journals, replayable
from nemo_gym.responses_api_models.preflight import PREFLIGHT_PATH, check_endpoint
from nemo_gym.server.base import BaseServer, json_route
from nemo_gym.traces import switch as traces


class OpenAIModelSettings(EndpointLimitSettings):
    base_url: Text
    """The endpoint (ending in /v1)."""
    api_key: Text | None = None
    """Sent as a bearer token (scrubbed from every log line)."""
    model: Text
    """The model to request."""
    request_timeout_s: float = Field(MODEL_REQUEST_TIMEOUT_S, gt=0)
    """Seconds per request."""


class OpenAIModelServer(BaseServer):
    """Forwards requests as they are, with the configured model; no conversion is needed."""

    Settings = OpenAIModelSettings
    settings: OpenAIModelSettings

    def __init__(self, spec: ServerSpec, head_url: str | None = None) -> None:
        super().__init__(spec, head_url)
        self.endpoint_calls = EndpointCalls.of_server(spec.name, self.settings)
        self.journals = Journals()  # replay of finished model calls after a crash (replay.py)

    def routes(self) -> list[Route]:
        return [
            json_route("/v1/responses", replayable(self.journals, self.responses)),
            json_route("/v1/chat/completions", replayable(self.journals, self.chat_completions)),
            json_route(PREFLIGHT_PATH, self.preflight, methods=("GET",)),
            self.endpoint_calls.route(),
        ]

    async def shutdown(self) -> None:
        self.journals.close()
        await super().shutdown()

    def _headers(self) -> dict[str, str]:
        return bearer_headers(self.settings.api_key)

    async def _forward(self, path: str, body: dict[str, Any]) -> tuple[Any, ModelCall]:
        settings = self.settings
        base_url = settings.base_url.rstrip("/")
        call = self.endpoint_calls.post(self.http, f"{base_url}{path}", {**body, "model": settings.model},
                                        base_url=base_url, model=settings.model, headers=self._headers(),
                                        timeout_s=settings.request_timeout_s)
        tracing = traces.ACTIVE
        if tracing is None:
            return await call
        return await tracing.model_call(call, operation_path=path, model=settings.model, provider="openai",
                                        base_url=base_url)

    async def preflight(self, body: Any, request: Request) -> dict[str, Any]:
        """The endpoint's check (reachable, key accepted, model served, context length)."""
        check = await check_endpoint(self.http, self.name, self.settings.base_url, self.settings.api_key,
                                     self.settings.model)
        return {"checks": [check.to_dict()]}

    async def responses(self, body: dict[str, Any], request: Request) -> Any:
        # Items fed back from a vllm_model rollout may carry our token fields, which OpenAI rejects.
        reply, call = await self._forward("/responses", protocol.strip_token_info(body))
        return {**reply, REPLY_FIELD: call.to_dict()} if isinstance(reply, dict) else reply

    async def chat_completions(self, body: dict[str, Any], request: Request) -> Any:
        reply, _ = await self._forward("/chat/completions", body)
        return reply

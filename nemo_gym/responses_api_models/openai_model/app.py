"""`POST /v1/responses` passed through to an OpenAI-compatible endpoint (OpenAI itself, or a gateway).

Settings: `base_url` (ending in /v1), `api_key` (sent as a bearer token; launch scrubs it from every log line),
`model`, `request_timeout_s` (default 600).
"""

from typing import Any

from pydantic import Field
from starlette.requests import Request
from starlette.routing import Route

from nemo_gym import protocol
from nemo_gym.config.servers import ServerSettings
from nemo_gym.config.typed import Text
from nemo_gym.server.base import BaseServer, json_route


class OpenAIModelSettings(ServerSettings):
    base_url: Text
    """The endpoint (ending in /v1)."""
    api_key: Text | None = None
    """Sent as a bearer token (scrubbed from every log line)."""
    model: Text
    """The model to request."""
    request_timeout_s: float = Field(600.0, gt=0)
    """Seconds per request."""


class OpenAIModelServer(BaseServer):
    """Forwards requests as they are, with the configured model; no conversion is needed."""

    Settings = OpenAIModelSettings

    def routes(self) -> list[Route]:
        return [
            json_route("/v1/responses", self.responses),
            json_route("/v1/chat/completions", self.chat_completions),
        ]

    async def _forward(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        settings = self.settings
        headers = {"authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        return await self.http.post_json(
            f"{settings.base_url.rstrip('/')}{path}",
            {**body, "model": settings.model},
            headers=headers,
            timeout_s=settings.request_timeout_s,
        )

    async def responses(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        # Items fed back from a vllm_model rollout may carry our token fields, which OpenAI rejects.
        return await self._forward("/responses", protocol.strip_token_info(body))

    async def chat_completions(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return await self._forward("/chat/completions", body)

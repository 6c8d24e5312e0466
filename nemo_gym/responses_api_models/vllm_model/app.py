"""`POST /v1/responses` in front of vLLM's Chat Completions, over one or more replicas.

Settings: `base_url` (one URL or a list, each ending in /v1), `api_key`, `model`, `return_token_id_information`,
`request_timeout_s` (default: `config.timeouts.MODEL_REQUEST_TIMEOUT_S`), and the endpoint's rate limits
(`max_requests_per_minute`, `max_tokens_per_minute`, `max_rate_limited_attempts`, `max_rate_limit_wait_s`:
see endpoint_calls.py), held by this server as a whole.

Each generation request goes through `EndpointCalls` (paced, re-sent after a 429, measured); a Responses reply
carries the call's record under `nemo_gym.model_calls.REPLY_FIELD`. `GET /preflight` checks every base URL
(nemo_gym.responses_api_models.preflight); `GET /rate_limited` counts the 429s they answered (endpoint_calls.py);
`GET /engine_load` reads each replica's load from its vLLM's `/metrics` (engine_load.py).

Token-exact continuation: when a request asks for token ids and its input already carries an earlier turn's exact
tokens (agents pass the output items back), the prompt is those tokens plus only what the chat template adds for
the new messages (nemo_gym.chat_tokens, rendered by vLLM's `/tokenize`), sent to vLLM's `/v1/completions` as token
ids. The earlier turns are never re-tokenized, so a trainer gets one contiguous sequence. Requests that declare
tools keep the Chat Completions path (vLLM's tool-call parser works on that path only).

A request with `max_total_sequence_length` (a trainer's max_seq_len) never makes prompt + generation longer: its
max_tokens is lowered to the room the prompt leaves (counted with vLLM's `/tokenize` on the chat path), and a
prompt that leaves no room gets the empty incomplete answer of a full context, which ends an agent's rollout.
"""

import asyncio
import logging
import re
from dataclasses import asdict
from functools import partial
from typing import Any, Awaitable, Callable, ClassVar, TypeVar

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym import protocol
from nemo_gym.chat_tokens import TemplateSpliceError, closing_from_probes, continuation_tokens, probe_conversations
from nemo_gym.compat.extra_body import extra_body
from nemo_gym.config.servers import ServerSpec
from nemo_gym.failures import FailureClass
from nemo_gym.http_client import RequestFailed, bearer_headers
from nemo_gym.config.model_servers import VLLMModelSettings
from nemo_gym.model_calls import REPLY_FIELD, ModelCall, public_endpoint
from nemo_gym.responses_api_models.endpoint_calls import EndpointCalls
from nemo_gym.responses_api_models.replay import Journals, replayable
from nemo_gym.responses_api_models.preflight import PREFLIGHT_PATH, check_endpoint
from nemo_gym.responses_api_models.stats_paths import ENGINE_LOAD_PATH, REPLICAS_PATH
from nemo_gym.responses_api_models.vllm_model.engine_load import parse_metrics
from nemo_gym.responses_api_models.vllm_model.hang_watch import AnsweredElsewhere, HangWatch
from nemo_gym.responses_api_models.vllm_model.routing import HEALTH_CLASSES, probe, shared_router
from nemo_gym.server.base import BaseServer, HandlerError, json_route
from nemo_gym.traces import switch as traces

logger = logging.getLogger(__name__)
T = TypeVar("T")
# A request that failed for one of these on one replica may be answered by another.
_FAILOVER_CLASSES = HEALTH_CLASSES | {FailureClass.CONNECT}

# vLLM 0.32 answers 400 with one of these when the prompt leaves no room to generate: longer than max_model_len
# ("maximum context length is ..."), or exactly max_model_len ("max_tokens must be at least 1, got 0" after it
# clamps max_tokens to the room left). "max_tokens=N cannot be greater than max_model_len" is a config error, not this.
_CONTEXT_LENGTH = re.compile(r"maximum context length is|max_tokens must be at least 1, got 0")


def is_context_length_error(exc: RequestFailed) -> bool:
    return exc.status == 400 and bool(_CONTEXT_LENGTH.search(str(exc.body or exc.message)))


def sequence_cap(params: dict[str, Any]) -> int | None:
    """The request's `max_total_sequence_length` (popped from `params`), or None."""
    cap = params.pop(protocol.MAX_SEQ_LEN_PARAM, None)
    if cap is not None and (type(cap) is not int or cap < 1):
        raise HandlerError(400, f"{protocol.MAX_SEQ_LEN_PARAM} must be a positive integer, got {cap!r}")
    return cap


def _within_cap(request: dict[str, Any], cap: int | None, prompt_length: int) -> bool:
    """Lower the request's max_tokens to the room `prompt_length` leaves under `cap`; False if there is none."""
    if cap is None:
        return True
    room = cap - prompt_length
    if room < 1:
        return False
    request["max_tokens"] = min(request.get("max_tokens") or room, room)
    return True


def _as_list(base_url: str | list[str]) -> list[str]:
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    if not urls:
        raise ValueError("base_url must name at least one vLLM server")
    return [u.rstrip("/") for u in urls]


class VLLMModelServer(BaseServer):
    """Converts Responses requests to Chat Completions and back; a rollout's calls stick to one replica while it
    keeps up (routing.py)."""

    Settings: ClassVar[type[VLLMModelSettings]] = VLLMModelSettings  # subclasses narrow it
    settings: VLLMModelSettings
    # The routing state is one table in memory all worker processes share (routing.py); `_closing` is a memo each
    # process rebuilds.
    stateless = True

    def __init__(self, spec: ServerSpec, head_url: str | None = None) -> None:
        super().__init__(spec, head_url)
        self.model: str = self.settings.model or ""
        self.base_urls: list[str] = _as_list(self.settings.base_url) if self.settings.base_url else []
        self.timeout_s = self.settings.request_timeout_s
        self.router = shared_router(spec.name, max(1, len(self.base_urls)), "load_aware",
                                    self.settings.outlier_rules())
        self.hang_watch = HangWatch(self.router)
        self._probes: set[asyncio.Task[bool]] = set()
        self._closing: dict[str, list[int]] = {}  # per vLLM base URL: how its chat template closes assistant turns
        self.endpoint_calls = EndpointCalls.of_server(spec.name, self.settings)
        self.journals = Journals()  # replay of finished model calls after a crash (replay.py)

    def routes(self) -> list[Route]:
        return [
            json_route("/v1/responses", replayable(self.journals, self.responses)),
            json_route("/v1/chat/completions", replayable(self.journals, self.chat_completions)),
            json_route(PREFLIGHT_PATH, self.preflight, methods=("GET",)),
            self.endpoint_calls.route(),
            json_route(REPLICAS_PATH, self.replica_stats, methods=("GET",)),
            json_route(ENGINE_LOAD_PATH, self.engine_load, methods=("GET",)),
        ]

    async def shutdown(self) -> None:
        self.hang_watch.close()
        self.journals.close()
        await super().shutdown()

    async def replica_stats(self, body: Any, request: Request) -> dict[str, Any]:
        """Each replica's state and counters (requests, failures by class, ejections), for the progress file; none
        with one replica, which is not routed."""
        if len(self.base_urls) < 2:
            return {"replicas": []}
        snapshot = self.router.snapshot()
        return {"replicas": [{"endpoint": public_endpoint(url), **asdict(stats)}
                             for url, stats in zip(self.base_urls, snapshot.replicas)]}

    async def engine_load(self, body: Any, request: Request) -> dict[str, Any]:
        """Each replica's load as its vLLM's `/metrics` says (engine_load.py), or why it could not be read."""
        return {"replicas": await asyncio.gather(*(self._engine_load(url) for url in self.base_urls))}

    async def _engine_load(self, base_url: str) -> dict[str, Any]:
        url = f"{base_url.removesuffix('/v1')}/metrics"  # vLLM serves /metrics at its root, beside /v1
        entry: dict[str, Any] = {"endpoint": public_endpoint(base_url)}
        try:
            status, raw = await self.http.request_raw("GET", url, headers=self._headers(),
                                                      timeout_s=self.settings.connect_timeout_s)
            if status != 200:
                raise RequestFailed(FailureClass.HTTP_5XX if status >= 500 else FailureClass.HTTP_4XX,
                                    f"HTTP {status} from {public_endpoint(url)}")
            return {**entry, **asdict(parse_metrics(raw.decode(errors="replace")))}
        except RequestFailed as exc:
            return {**entry, "error": f"{exc.failure_class.value}: {exc.message}"}
        except ValueError as exc:
            return {**entry, "error": f"{FailureClass.INVALID_RESPONSE.value}: {exc}"}

    async def preflight(self, body: Any, request: Request) -> dict[str, Any]:
        """The check of every base URL (reachable, key accepted, model served, context length)."""
        checks = [check_endpoint(self.http, self.name, url, self.settings.api_key, self.model)
                  for url in self.base_urls]
        return {"checks": [check.to_dict() for check in await asyncio.gather(*checks)]}

    async def on_replicas(self, request: Request, call: Callable[[str], Awaitable[T]]) -> T:
        """`call` with the vLLM base URL of a replica, counted in flight there until it ends; on a failure of the
        replica's (`_FAILOVER_CLASSES`), again on another one, at most `failover_attempts` replicas in all, all within
        `request_timeout_s` (the timeouts nest: docs/architecture.md).

        routing.py picks each: the replica of the session's last turn (its prefix cache) while that replica is in
        service and not overloaded, else the least loaded one in service; it ejects a replica that keeps failing.
        A replica that refuses a connection is down until a probe, started here by the traffic that needs one, finds
        it answering; hang_watch.py sends a request on a replica that stopped answering to another one too.
        """
        if len(self.base_urls) == 1:  # nothing to choose, eject or fail over to: no routing work per request
            return await call(self.base_urls[0])
        session = request.headers.get(protocol.SESSION_HEADER)
        deadline = asyncio.get_running_loop().time() + self.timeout_s  # every attempt within the request's time
        tried: tuple[int, ...] = ()
        while True:
            self._probe_down_replicas()
            try:
                with self.router.routed(session, avoid=tried) as index:
                    tried += (index,)
                    elsewhere = partial(self._elsewhere, session, index, call)
                    return await self.hang_watch.watched(index, call(self.base_urls[index]), deadline, elsewhere)
            except AnsweredElsewhere as answered:
                return answered.answer
            except RequestFailed as exc:
                if (exc.failure_class not in _FAILOVER_CLASSES or len(tried) >= self.settings.failover_attempts
                        or asyncio.get_running_loop().time() >= deadline or not self.router.in_service_besides(tried)):
                    raise
                logger.info("replica %s failed a request (%s), sending it to another: %s",
                            public_endpoint(self.base_urls[tried[-1]]), exc.failure_class.value, exc.message)

    async def _elsewhere(self, session: str | None, hung: int, call: Callable[[str], Awaitable[T]]) -> T:
        """`call` on a replica other than `hung`: the second try of a request hang_watch.py took for hung there (it
        ends with the first, within the request's time)."""
        with self.router.routed(session, avoid=(hung,)) as index:
            return await call(self.base_urls[index])

    def _probe_down_replicas(self) -> None:
        for index in self.router.due_probes():
            url = f"{self.base_urls[index]}/models"
            check = partial(self.http.get_json, url, headers=self._headers(), timeout_s=self.settings.connect_timeout_s)
            task = asyncio.get_running_loop().create_task(probe(self.router, index, check))
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)

    def _headers(self) -> dict[str, str]:
        return bearer_headers(self.settings.api_key)

    async def _generate(self, base_url: str, path: str, body: dict[str, Any]) -> tuple[Any, ModelCall]:
        """A generation request to one replica, under the endpoint's limits; the reply and its record."""
        call = self.endpoint_calls.post(self.http, f"{base_url}{path}", body, base_url=base_url,
                                        model=self.model, headers=self._headers(), timeout_s=self.timeout_s)
        tracing = traces.ACTIVE
        if tracing is None:
            return await call
        return await tracing.model_call(call, operation_path=path, model=self.model, provider="vllm",
                                        base_url=base_url)

    async def responses(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return await self.on_replicas(request, partial(self._respond, body=body))

    async def _respond(self, base_url: str, *, body: dict[str, Any]) -> dict[str, Any]:
        params = dict(body)
        default = self.settings.return_token_id_information
        with_tokens = bool(params.pop(protocol.RETURN_TOKENS_PARAM, default))
        cap = sequence_cap(params)
        try:
            chat_request = protocol.to_chat_request(params, self.model)
            # NeMo Gym's per-request vLLM extras (its seed); as there, the request's own fields win.
            chat_request = {**extra_body(params), **chat_request}
        except (KeyError, TypeError, ValueError) as exc:
            raise HandlerError(400, f"invalid Responses request: {type(exc).__name__}: {exc}") from None
        exact = protocol.exact_token_prefix(params.get("input")) if with_tokens and not params.get("tools") else None
        if exact is not None:
            prompt_ids = await self._continue_exactly(base_url, params, *exact)
            if prompt_ids is not None:
                return await self._complete_tokens(base_url, params, chat_request, prompt_ids, cap)
        if cap is not None and not _within_cap(chat_request, cap, await self._prompt_length(base_url, chat_request)):
            return protocol.incomplete_response(params, self.model)
        if with_tokens:
            chat_request.update(logprobs=True, return_token_ids=True)
        try:
            completion, call = await self._generate(base_url, "/chat/completions", chat_request)
        except RequestFailed as exc:
            if is_context_length_error(exc):
                logger.info("prompt exceeds the context window; answering incomplete")
                return protocol.incomplete_response(params, self.model)
            raise
        if not completion.get("choices"):
            raise RequestFailed(FailureClass.INVALID_RESPONSE, f"{public_endpoint(base_url)} answered without choices")
        return {**protocol.chat_to_response(completion, params, with_token_info=with_tokens),
                REPLY_FIELD: call.to_dict()}

    async def _tokenize(self, base_url: str, messages: list[dict[str, Any]], add_generation_prompt: bool) -> list[int]:
        # vLLM serves /tokenize at its root, beside /v1.
        reply = await self.http.post_json(
            f"{base_url.removesuffix('/v1')}/tokenize",
            {"model": self.model, "messages": messages, "add_generation_prompt": add_generation_prompt},
            headers=self._headers(), timeout_s=self.timeout_s,
        )
        return list(reply["tokens"])

    async def _prompt_length(self, base_url: str, chat_request: dict[str, Any]) -> int:
        """Tokens of the prompt vLLM's chat endpoint will build for `chat_request`."""
        body: dict[str, Any] = {"model": self.model, "messages": chat_request["messages"],
                                "add_generation_prompt": True,
                                **{key: chat_request[key] for key in ("tools", "chat_template_kwargs")
                                   if key in chat_request}}
        reply = await self.http.post_json(f"{base_url.removesuffix('/v1')}/tokenize", body, headers=self._headers(),
                                          timeout_s=self.timeout_s)
        return len(reply["tokens"])

    async def _assistant_closing(self, base_url: str) -> list[int]:
        if base_url not in self._closing:
            probe_a, probe_b = probe_conversations()
            self._closing[base_url] = closing_from_probes(
                await self._tokenize(base_url, probe_a, False), await self._tokenize(base_url, probe_b, False))
        return self._closing[base_url]

    async def _continue_exactly(self, base_url: str, params: dict[str, Any], index: int, so_far: list[int],
                                generated: list[int]) -> list[int] | None:
        """The exact tokens so far plus the template's new part; None (use the chat path) where the template
        cannot be continued token-exactly."""
        input_, instructions = params["input"], params.get("instructions")
        try:
            before = await self._tokenize(base_url, protocol.input_to_messages(input_[: index + 1], instructions),
                                          False)
            after = await self._tokenize(base_url, protocol.input_to_messages(input_, instructions), True)
            return so_far + continuation_tokens(before, after, generated, await self._assistant_closing(base_url))
        except TemplateSpliceError as exc:
            logger.warning("token-exact continuation not possible, re-rendering the conversation: %s", exc)
            return None

    async def _complete_tokens(self, base_url: str, params: dict[str, Any], chat_request: dict[str, Any],
                               prompt_ids: list[int], cap: int | None) -> dict[str, Any]:
        body = {k: v for k, v in chat_request.items() if k not in ("messages", "tools", "tool_choice")}
        body.update(prompt=prompt_ids, return_token_ids=True, logprobs=0)
        if not _within_cap(body, cap, len(prompt_ids)):
            return protocol.incomplete_response(params, self.model)
        try:
            completion, call = await self._generate(base_url, "/completions", body)
        except RequestFailed as exc:
            if is_context_length_error(exc):
                return protocol.incomplete_response(params, self.model)
            raise
        if not completion.get("choices"):
            raise RequestFailed(FailureClass.INVALID_RESPONSE, f"{public_endpoint(base_url)} answered without choices")
        return {**protocol.text_completion_to_response(completion, params), REPLY_FIELD: call.to_dict()}

    async def chat_completions(self, body: dict[str, Any], request: Request) -> Any:
        async def chat(base_url: str) -> Any:
            completion, _ = await self._generate(base_url, "/chat/completions", {**body, "model": self.model})
            return completion

        return await self.on_replicas(request, chat)

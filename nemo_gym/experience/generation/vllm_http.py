"""A generation backend that sends token ids to vLLM's OpenAI-compatible `/v1/completions` and takes token ids back.

Each sample is one request (prompt = its unpadded token ids), spread round-robin over the replicas; the reply's
`token_ids` and `logprobs.token_logprobs` are used exactly as vLLM produced them, never re-tokenized. All HTTP runs
on one private event loop in a background thread owned by the backend, so there is one connection pool and one
concurrency limit whoever calls: `generate` from plain code or from inside a running loop, `generate_async` from
any loop (it awaits the private loop's work without blocking the caller's).

Weight updates (`update_weights`, `invalidate_kv_cache`) use vLLM's dev-mode endpoints at each server root, all
replicas concurrently, over the transport the trainer chose: `disk` reloads each replica from the trainer's folder
(vllm_refit.py); `gloo` (CPU) and `nccl` (CUDA) send the model's tensors over vLLM's weight-transfer API
(vllm_collective.py). Each replica is paused with `keep` around the load, and resumed only on whole weights;
`weight_version` advances only once every replica reports the new version. Each sample's `weight_versions` comes
from weight_versions.py.
"""

import asyncio
import concurrent.futures
import itertools
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, AsyncIterator, Optional, Sequence

import torch

from nemo_gym.config.timeouts import CONNECT_TIMEOUT_S, MODEL_REQUEST_TIMEOUT_S, WEIGHT_UPDATE_TIMEOUT_S
from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.errors import GenerationError, ReplicaPausedError, WeightUpdateError
from nemo_gym.experience.generation.interfaces import (
    GenerationConfig,
    GenerationDatumSpec,
    GenerationInterface,
    GenerationOutputSpec,
)
from nemo_gym.experience.generation.samples import (
    NO_ROOM,
    GeneratedSample,
    SampleRequest,
    pack_outputs,
    require_config,
    sample_requests,
)
from nemo_gym.experience.generation.settings import sampling_of, stop_fields, stop_token_ids_of
from nemo_gym.experience.generation.vllm_collective import DISK, WEIGHT_TRANSPORTS, CollectiveTransport
from nemo_gym.experience.generation.vllm_refit import (
    CONTROL_TIMEOUT_S,
    Step,
    cancelled_reason,
    reload_replica,
    reset_replica_kv,
    server_root,
)
from nemo_gym.experience.generation.weight_source import TensorMeta, WeightSource, weight_source
from nemo_gym.experience.generation.weight_versions import WeightVersionLog
from nemo_gym.experience.generation.weights import check_weights_dir
from nemo_gym.http_client import HttpClient, RequestFailed, RetryPolicy, bearer_headers

# Beyond an update's own timeout: the /resume and the version check that follow it, and some slack.
_AFTER_LOAD_S = 2 * CONTROL_TIMEOUT_S + 10.0
# How long a cancelled update may take to clean up: each replica's /resume (all at once), and some slack.
_STOP_S = CONTROL_TIMEOUT_S + 10.0


def _base_url_list(base_urls: str | Sequence[str]) -> list[str]:
    urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
    if not urls:
        raise ValueError("VllmHttpGeneration needs at least one base URL")
    return [url.rstrip("/") for url in urls]


def _parse_choice(reply: Any, url: str, request: SampleRequest) -> GeneratedSample:
    """The generated ids, their log-probs and the truncation flag of a completions reply, or GenerationError."""
    try:
        choice = reply["choices"][0]
        token_ids = [int(t) for t in choice["token_ids"]]
        logprobs = [float(lp) for lp in choice["logprobs"]["token_logprobs"]]
        finish_reason = choice["finish_reason"]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise GenerationError(
            f"sample {request.index}: malformed reply from {url} (invalid_response): {type(exc).__name__}: {exc}"
        ) from None
    if len(token_ids) != len(logprobs):
        raise GenerationError(f"sample {request.index}: {url} returned {len(token_ids)} token ids but "
                              f"{len(logprobs)} log-probs (invalid_response)")
    if finish_reason not in ("stop", "length"):
        raise GenerationError(f"sample {request.index}: {url} finished with {finish_reason!r} (invalid_response)")
    return GeneratedSample(token_ids, logprobs, truncated=finish_reason == "length")


class VllmHttpGeneration(GenerationInterface):
    """vLLM over HTTP, token in / token out, one request per sample, over one or several replicas.

    `weight_version` is the version the replicas serve at construction. `weight_transport` is how `update_weights`
    moves weights: "disk" (a folder the trainer wrote, the default), "gloo" (the model's tensors over gloo, for
    replicas on CPU started with local_vllm_model's weight_transfer_args) or "nccl" (over vLLM's NCCL engine, from a
    trainer on a GPU); `weight_transfer_address` is where a gloo group listens for the replicas' workers (this
    machine's loopback by default). `weight_update_timeout_s` bounds a replica's pause + load + relabel in
    `update_weights` (its /resume and check get 30 s more each), and a collective push's rendezvous and broadcast
    each too.
    `max_attempts` is per completion request, 1 by default: the caller holds the retry budget (the trajectory
    collector's `max_group_attempts`, or a trainer's own), as every server does (docs/architecture.md, "Retry
    budget"). Raise it only where nothing above retries; it then retries connection failures, timeouts, 5xx and 429.
    """

    supports_async = True

    def __init__(
        self,
        config: GenerationConfig,
        base_urls: str | Sequence[str],
        *,
        api_key: Optional[str] = None,
        max_concurrency: int = 128,
        request_timeout_s: float = MODEL_REQUEST_TIMEOUT_S,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        weight_version: int = 0,
        weight_update_timeout_s: float = WEIGHT_UPDATE_TIMEOUT_S,
        max_attempts: int = 1,
        weight_transport: str = DISK,
        weight_transfer_address: str = "127.0.0.1",
    ) -> None:
        require_config(config, ("model_name", "max_new_tokens", "max_seq_len", "pad_token_id"), "VllmHttpGeneration")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if weight_transport not in WEIGHT_TRANSPORTS:
            raise ValueError(f"weight_transport must be one of {WEIGHT_TRANSPORTS}, got {weight_transport!r}")
        self.config = config
        self.base_urls = _base_url_list(base_urls)
        self._headers = bearer_headers(api_key)
        self._max_concurrency = max_concurrency
        self._http = HttpClient(connect_timeout_s=connect_timeout_s, read_timeout_s=request_timeout_s,
                                max_connections=max_concurrency, retry=RetryPolicy(max_attempts=max_attempts))
        self._round_robin = itertools.count()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._semaphore: Optional[asyncio.Semaphore] = None
        self._start_lock = threading.Lock()
        self._versions = WeightVersionLog(weight_version)  # read and changed on the private loop only
        self._weight_update_timeout_s = weight_update_timeout_s
        self._update_lock = threading.Lock()  # one update or invalidation at a time
        self._update_task: Optional[asyncio.Task[None]] = None  # the update under way, on the private loop
        self.weight_transport = weight_transport
        self._collective = (None if weight_transport == DISK else
                            CollectiveTransport(weight_transport, self._http, self._headers, weight_update_timeout_s,
                                                weight_transfer_address))
        self.last_weight_update: dict[str, dict[str, float]] = {}  # replica -> step -> seconds, of the last update

    def __repr__(self) -> str:  # never shows the api key
        return f"VllmHttpGeneration(model={self.config['model_name']!r}, base_urls={self.base_urls})"

    @property
    def pad_token_id(self) -> int:
        return int(self.config["pad_token_id"])

    @property
    def weight_version(self) -> int:
        return self._versions.version

    def update_weights(self, weights: str | os.PathLike[str] | torch.nn.Module | WeightSource,
                       version: int) -> None:
        """Load `weights` into every replica (concurrently); on return each one serves and reports `version`.

        With the disk transport `weights` is a folder (weights.write_weights), checked before any replica is touched
        (vLLM's engine dies on a missing or truncated file); with gloo or nccl it is the model (or a WeightSource),
        whose tensors go straight to the replicas. Each replica is paused with `keep` around the load (requests in
        flight freeze, and finish on the new weights). WeightUpdateError names every replica that did not take
        `version`, why, and what it serves now, and those that did; `weight_version` then stays where it was.
        `last_weight_update` has each replica's steps and their wall times.

        Whatever ends an update early (a replica's failure, the update's bound, Ctrl-C), a replica is resumed only
        on whole weights: its old ones, untouched, or the new ones, loaded. One whose load had begun stays paused
        with its weight version unchanged, and the error is a ReplicaPausedError naming it and the step it stopped
        at. Interrupted (KeyboardInterrupt), this cancels the update, waits for that clean-up (at most 40 s; a second
        Ctrl-C stops waiting), and raises the KeyboardInterrupt again with the WeightUpdateError as its __cause__.
        """
        roots = [server_root(url) for url in self.base_urls]
        if self._collective is None:
            if not isinstance(weights, (str, os.PathLike)):
                raise TypeError(f"weight_transport='disk' loads a weights folder (weights.write_weights), not "
                                f"{type(weights).__name__}; to send a model's tensors, construct VllmHttpGeneration "
                                f"with weight_transport='gloo' (CPU) or 'nccl' (CUDA)")
            try:
                check_weights_dir(weights)
            except ValueError as exc:
                raise WeightUpdateError(version, {root: f"invalid_weights: {exc}" for root in roots}, [],
                                        self.weight_version, note="no replica was touched") from None
            path = os.path.abspath(weights)  # vLLM resolves it from its own working directory
            bound_s = self._weight_update_timeout_s + _AFTER_LOAD_S
            push = self._disk_push(path, version)
        else:
            if isinstance(weights, (str, os.PathLike)):
                raise TypeError(f"weight_transport={self.weight_transport!r} sends a model's tensors: pass the model "
                                f"(torch.nn.Module) or a WeightSource, not a folder; a folder needs "
                                f"weight_transport='disk'")
            source = weight_source(weights)
            metas = source.metadata()
            # The rendezvous (first push only), the broadcast and the paused load are bounded one by one.
            bound_s = 3 * self._weight_update_timeout_s + _AFTER_LOAD_S
            push = self._collective_push(source, metas, version)
        steps = {root: Step("start") for root in roots}
        results: dict[str, Optional[str]] = {}  # replica -> None (took the version) or why not, once it finished
        unfinished = ""  # why replicas that had not finished were stopped
        with self._update_lock:
            try:
                update = asyncio.run_coroutine_threadsafe(self._update_all(roots, push, version, steps, results),
                                                          self._private_loop())
                update.result(timeout=bound_s)
            except concurrent.futures.TimeoutError:
                self._stop_update()
                unfinished = f"timeout: the update did not finish in {bound_s:g} s"
            except BaseException as interrupt:  # e.g. KeyboardInterrupt: each replica is left as described above
                self._stop_update()
                raise interrupt from self._update_error(version, steps, results,
                                                        f"interrupted ({type(interrupt).__name__})")
        error = self._update_error(version, steps, results, unfinished)
        if error is not None:
            raise error

    def _disk_push(self, path: str, version: int) -> Callable[[str, Step], Awaitable[Optional[str]]]:
        async def push(root: str, step: Step) -> Optional[str]:
            return await reload_replica(self._http, root, path, version, self._weight_update_timeout_s,
                                        self._headers, step)

        return push

    def _collective_push(self, source: WeightSource, metas: list[TensorMeta],
                         version: int) -> Callable[[str, Step], Awaitable[Optional[str]]]:
        collective = self._collective
        assert collective is not None

        async def push(root: str, step: Step) -> Optional[str]:
            return await collective.push(root, source, metas, version, step)

        return push

    def invalidate_kv_cache(self) -> bool:
        """Drop every replica's cached keys and values (vLLM `/reset_prefix_cache?reset_running_requests=true`):
        running requests are preempted and recompute theirs with the weights loaded now. True when every replica
        reports success; GenerationError naming the replica when one cannot be reached."""
        roots = [server_root(url) for url in self.base_urls]
        with self._update_lock:
            future = asyncio.run_coroutine_threadsafe(self._reset_all(roots), self._private_loop())
            return all(future.result())

    async def _update_all(self, roots: list[str], push: Callable[[str, Step], Awaitable[Optional[str]]],
                          version: int, steps: dict[str, Step], results: dict[str, Optional[str]]) -> None:
        self._update_task = asyncio.current_task()
        self._versions.begin(version)

        async def one(root: str) -> None:
            results[root] = await push(root, steps[root])

        try:
            await asyncio.gather(*(one(root) for root in roots))
        finally:
            self._update_task = None
            self._versions.end(len(results) == len(roots) and all(reason is None for reason in results.values()))
            self.last_weight_update = {root: step.seconds for root, step in steps.items()}

    def _stop_update(self) -> None:
        """Cancel the update under way and wait, at most _STOP_S, for its replicas to be left as update_weights
        says."""
        stopping = asyncio.run_coroutine_threadsafe(self._cancel_update(), self._private_loop())
        try:
            stopping.result(timeout=_STOP_S)
        except concurrent.futures.TimeoutError:
            stopping.cancel()

    async def _cancel_update(self) -> None:
        # Scheduled after the update: the loop has started it by now, unless it has already finished.
        task = self._update_task
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    def _update_error(self, version: int, steps: dict[str, Step], results: dict[str, Optional[str]],
                      unfinished: str) -> Optional[WeightUpdateError]:
        """The error of an update whose replicas ended with `results` (`unfinished`: why the others did not), or
        None when every replica took `version`."""
        failed: dict[str, str] = {}
        for root, step in steps.items():
            reason = results[root] if root in results else f"{unfinished}; {cancelled_reason(step)}"
            if reason is not None:
                failed[root] = reason
        if not failed:
            return None
        updated = [root for root in steps if root in results and results[root] is None]
        paused = {root: steps[root].failed_at or steps[root].name for root in failed if steps[root].paused}
        if paused:
            return ReplicaPausedError(version, failed, updated, self.weight_version, paused)
        return WeightUpdateError(version, failed, updated, self.weight_version)

    async def _reset_all(self, roots: list[str]) -> list[bool]:
        async def reset(root: str) -> bool:
            try:
                return await reset_replica_kv(self._http, root, self._weight_update_timeout_s, self._headers)
            except RequestFailed as exc:
                raise GenerationError(f"invalidate_kv_cache: {root} failed ({exc.failure_class}): "
                                      f"{exc.message}") from None
            except TimeoutError:
                raise GenerationError(f"invalidate_kv_cache: {root} did not answer in "
                                      f"{self._weight_update_timeout_s} s (timeout)") from None

        return list(await asyncio.gather(*(reset(root) for root in roots)))

    def generate(self, data: BatchedDataDict[GenerationDatumSpec],
                 greedy: bool = False) -> BatchedDataDict[GenerationOutputSpec]:
        requests = sample_requests(data, self.config)
        future = asyncio.run_coroutine_threadsafe(self._generate_all(requests, greedy), self._private_loop())
        try:
            results = future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt: stop the requests still in flight
            raise
        return pack_outputs(requests, results, self.pad_token_id, min_width=data["input_ids"].shape[1])

    async def generate_async(
        self, data: BatchedDataDict[GenerationDatumSpec], greedy: bool = False
    ) -> AsyncIterator[tuple[int, BatchedDataDict[GenerationOutputSpec]]]:
        requests = sample_requests(data, self.config)
        width = data["input_ids"].shape[1]
        loop = self._private_loop()
        pending = [asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._indexed(r, greedy), loop))
                   for r in requests]
        try:
            for next_done in asyncio.as_completed(pending):
                request, result = await next_done
                yield request.index, pack_outputs([request], [result], self.pad_token_id, min_width=width)
        finally:  # the consumer stopped early or a sample failed: cancel the rest, and read failures nobody awaited
            for future in pending:
                if not future.cancel() and not future.cancelled():
                    future.exception()  # marks it retrieved, so asyncio logs no "exception was never retrieved"

    def shutdown(self) -> None:
        """Close the connections and stop the private loop; a later call starts them again."""
        with self._start_lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = self._semaphore = None
        if self._collective is not None:
            self._collective.close()
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._http.aclose(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()

    def __enter__(self) -> "VllmHttpGeneration":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                # Daemon: a caller that forgets shutdown() must not keep the interpreter from exiting.
                thread = threading.Thread(target=loop.run_forever, name="vllm-http-generation", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _generate_all(self, requests: list[SampleRequest], greedy: bool) -> list[GeneratedSample]:
        tasks = [asyncio.ensure_future(self._generate_one(r, greedy)) for r in requests]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:  # one sample failed: the batch has failed, so stop spending the server on the rest
                task.cancel()
            raise

    async def _indexed(self, request: SampleRequest, greedy: bool) -> tuple[SampleRequest, GeneratedSample]:
        return request, await self._generate_one(request, greedy)

    async def _generate_one(self, request: SampleRequest, greedy: bool) -> GeneratedSample:
        if request.max_new_tokens == 0:
            return NO_ROOM
        if self._semaphore is None:  # created on the private loop, the only one that awaits it
            self._semaphore = asyncio.Semaphore(self._max_concurrency)
        url = f"{self.base_urls[next(self._round_robin) % len(self.base_urls)]}/completions"
        async with self._semaphore:
            mark = self._versions.mark()
            try:
                reply = await self._http.post_json(url, self._body(request, greedy), headers=self._headers)
            except RequestFailed as exc:
                raise GenerationError(f"sample {request.index}: {url} failed after {exc.attempts} attempt(s) "
                                      f"({exc.failure_class}): {exc.message}") from None
            versions = self._versions.since(mark)
        return replace(_parse_choice(reply, url, request), weight_versions=versions)

    def _body(self, request: SampleRequest, greedy: bool) -> dict[str, Any]:
        """The completions request of one sample, with the config's generation settings (settings.py)."""
        body: dict[str, Any] = {
            "model": self.config["model_name"],
            "prompt": request.prompt_ids,
            "max_tokens": request.max_new_tokens,
            **sampling_of(self.config, greedy=greedy).request_fields(),
            "logprobs": 0,  # the chosen token's raw log-prob only (vLLM's default logprobs mode)
            "return_token_ids": True,
            **stop_fields(request.stop_strings),
        }
        stop_token_ids = stop_token_ids_of(self.config)
        if stop_token_ids:
            body["stop_token_ids"] = stop_token_ids
        return body

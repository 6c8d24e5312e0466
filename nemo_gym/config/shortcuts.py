"""`+model=...` and `+model_url=...`: one key instead of the nested settings of the policy model server.

`+model=<folder or Hugging Face id>` is what a `local_vllm_model` server loads (and serves under the folder's name),
or the served model name a `vllm_model` server requests. `+model_url=<OpenAI-compatible /v1 URL>` points the
policy model at a server that is already running: a `local_vllm_model` becomes a `vllm_model` that starts nothing.
Where the config also holds `policy_base_url` / `policy_model_name` (env.yaml's), they take the shortcut's values too.
The server they apply to is `policy_model`, or the config's only vllm-backed model server.
"""

from pathlib import PurePosixPath
from typing import Any

from nemo_gym.config.model_servers import LocalVLLMModelSettings, VLLMModelSettings
from nemo_gym.config.servers import as_server
from nemo_gym.config.typed import Settings, Text, build
from nemo_gym.errors import ConfigError

LOCAL_VLLM = "local_vllm_model"
VLLM = "vllm_model"
MODELS_KIND = "responses_api_models"
POLICY_MODEL = "policy_model"
POLICY_BASE_URL = "policy_base_url"
POLICY_MODEL_NAME = "policy_model_name"


class ModelShortcuts(Settings):
    model: Text | None = None
    """The policy model: a local folder or Hugging Face id for local_vllm_model, the served name for vllm_model."""
    model_url: Text | None = None
    """An already running OpenAI-compatible server (URL ending in /v1) for the policy model; nothing is started."""


def served_name(model: str) -> str:
    """The name vLLM serves a model folder or id under: its last path part."""
    return PurePosixPath(model.rstrip("/")).name or model


def _target(raw: dict[str, Any]) -> str:
    candidates = [name for name, value in raw.items()
                  if (spec := as_server(str(name), value)) and spec.kind == MODELS_KIND
                  and spec.implementation in (LOCAL_VLLM, VLLM)]
    if POLICY_MODEL in candidates:
        return POLICY_MODEL
    if len(candidates) == 1:
        return candidates[0]
    found = ", ".join(sorted(map(str, candidates))) or "none"
    raise ConfigError(f"+model / +model_url need a '{POLICY_MODEL}' server, or exactly one {LOCAL_VLLM} or {VLLM} "
                      f"server, in the config (found: {found}); set that server's own keys instead")


def _as_remote(settings: dict[str, Any], url: str, model: str, raw: dict[str, Any]) -> dict[str, Any]:
    local_only = set(LocalVLLMModelSettings.model_fields) - set(VLLMModelSettings.model_fields)
    remote = {key: value for key, value in settings.items() if key not in local_only}
    remote.update(base_url=url, model=model)
    if "policy_api_key" in raw and "api_key" not in remote:
        remote["api_key"] = "${policy_api_key}"
    return remote


def apply_model_shortcuts(raw: dict[str, Any]) -> None:
    """Rewrite the policy model server of the merged (unresolved) config in place for +model and +model_url."""
    shortcuts = build(ModelShortcuts, raw)
    if shortcuts.model is None and shortcuts.model_url is None:
        return
    name = _target(raw)
    (implementation, settings), = raw[name][MODELS_KIND].items()
    settings = dict(settings or {})
    if implementation == LOCAL_VLLM and shortcuts.model is not None:
        settings.update(model_path=shortcuts.model, served_model_name=served_name(shortcuts.model))
    elif implementation == VLLM and shortcuts.model is not None:
        settings["model"] = shortcuts.model
    if shortcuts.model_url is not None:
        if implementation == LOCAL_VLLM:
            model = shortcuts.model or settings.get("served_model_name") or served_name(str(settings["model_path"]))
            settings = _as_remote(settings, shortcuts.model_url, model, raw)
        else:
            settings["base_url"] = shortcuts.model_url
        implementation = VLLM
    raw[name] = {MODELS_KIND: {implementation: settings}}
    # The top-level values they stand for (env.yaml's), so that no stale one is left to print or to interpolate.
    if shortcuts.model_url is not None and POLICY_BASE_URL in raw:
        raw[POLICY_BASE_URL] = shortcuts.model_url
    if (shortcuts.model is not None or shortcuts.model_url is not None) and POLICY_MODEL_NAME in raw \
            and implementation == VLLM and "${" not in str(settings.get("model")):
        raw[POLICY_MODEL_NAME] = settings["model"]

"""Check every server's settings as its implementation types them, and that their timeouts nest, before ng_run (or
ng_e2e_collect_rollouts) starts anything."""

from nemo_gym.config.loader import COMMAND_LINE, NO_SOURCE, GlobalConfig
from nemo_gym.config.servers import ServerSettings, ServerSpec
from nemo_gym.config.timeouts import MODEL_CALL_KEY, MODEL_REQUEST_KEY, ROLLOUT_KEY, Timeout, check_nested
from nemo_gym.server.base import BaseServer, server_settings
from nemo_gym.server.launch import server_class

MODEL_SERVER_REF = "model_server"  # an agent's reference to its model server (responses_api_agents.base)


def server_classes(config: GlobalConfig) -> dict[str, type[BaseServer]]:
    """Every server's implementation class, by instance name, in config order; a ConfigError for a missing one."""
    return {name: server_class(spec) for name, spec in config.servers().items()}


def check_server_settings(config: GlobalConfig, rollout_timeout_s: float | None = None,
                          classes: dict[str, type[BaseServer]] | None = None) -> dict[str, ServerSettings]:
    """Every server's typed settings, by instance name; a ConfigError for the first server whose implementation is
    missing or whose settings are wrong, naming the setting, what it should be, and the file and line that set it.

    Then the timeouts nest (nemo_gym.config.timeouts): each agent's model call is no shorter than its model server's
    request, and no longer than `rollout_timeout_s`, the rollout attempt of the collection that runs it (when the
    caller runs one)."""
    specs = config.servers()
    classes = server_classes(config) if classes is None else classes
    settings = {name: server_settings(classes[name], spec, config.source_of) for name, spec in specs.items()}
    for name, spec in specs.items():
        model_call = _timeout(config, spec, settings[name], MODEL_CALL_KEY)
        if model_call is None:
            continue
        model = specs.get(spec.ref(MODEL_SERVER_REF).name) if MODEL_SERVER_REF in spec.settings else None
        request = _timeout(config, model, settings[model.name], MODEL_REQUEST_KEY) if model else None
        if request is not None:
            check_nested(request, model_call)
        if rollout_timeout_s is not None:
            where = config.source_of(ROLLOUT_KEY)
            check_nested(model_call, Timeout(ROLLOUT_KEY, rollout_timeout_s, _set_in(where)))
    return settings


def _timeout(config: GlobalConfig, spec: ServerSpec, settings: ServerSettings, field: str) -> Timeout | None:
    """The server's timeout `field` (its default when the config leaves it out), or None when it has no such
    setting."""
    seconds = getattr(settings, field, None)
    if not isinstance(seconds, (int, float)):
        return None
    key = f"{spec.name}.{spec.kind}.{spec.implementation}.{field}"
    return Timeout(key, float(seconds), _set_in(config.source_of(key)) if field in spec.settings else None)


def _set_in(where: str) -> str | None:
    if where == NO_SOURCE:
        return None
    return "set on the command line" if where == COMMAND_LINE else f"set in {where}"

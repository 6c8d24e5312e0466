"""Entry point of one server subprocess: `python -m nemo_gym.server.launch` with its spec in the environment.

The spec travels in an environment variable rather than on the command line, so secrets in the settings do not
show up in `ps` output.
"""

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType

import orjson

from nemo_gym import console
from nemo_gym.config.redact import secret_values
from nemo_gym.config.servers import ServerSpec
from nemo_gym.errors import ConfigError
from nemo_gym.server.base import BaseServer, server_settings
from nemo_gym.server.colocated import serve_together
from nemo_gym.server.logs import configure_logging, register_secrets
from nemo_gym.server.workers import reuseport_socket, serve_workers

SPEC_ENV = "NEMO_GYM_SERVER_SPEC"
HEAD_URL_ENV = "NEMO_GYM_HEAD_URL"


def _import_entrypoint(spec: ServerSpec, entrypoint: str | None) -> ModuleType:
    if entrypoint and entrypoint.endswith(".py"):
        if not Path(entrypoint).is_file():
            # A relative path most often means ng_run was started in another directory than the config assumes.
            raise ConfigError(f"server '{spec.name}': entrypoint {entrypoint} is not a file "
                              f"(relative paths are relative to the directory ng_run runs in: {Path.cwd()})")
        module_spec = importlib.util.spec_from_file_location(f"ng_server_{spec.name}", entrypoint)
        assert module_spec is not None and module_spec.loader is not None, "a .py file always has a loader"
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return module
    module_name = entrypoint if entrypoint else f"nemo_gym.{spec.kind}.{spec.implementation}.app"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"server '{spec.name}': no implementation '{spec.implementation}' for {spec.kind} "
            f"(looked for module {module_name}: {exc})"
        ) from None


def server_class(spec: ServerSpec) -> type[BaseServer]:
    """The BaseServer subclass defined in the implementation's module."""
    module = _import_entrypoint(spec, server_settings(BaseServer, spec, unknown="ignore").entrypoint)
    classes = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, BaseServer) and obj.__module__ == module.__name__
    ]
    concrete = [c for c in classes if not any(issubclass(other, c) and other is not c for other in classes)]
    if len(concrete) != 1:
        raise ConfigError(f"{module.__name__} must define exactly one server class, found {len(concrete)}")
    _check_serve_takes_sock(spec, concrete[0])
    return concrete[0]


def _check_serve_takes_sock(spec: ServerSpec, cls: type[BaseServer]) -> None:
    """ng_run holds every server's port until it stops and hands it over as `serve(host, port, sock)`: a class whose
    own `serve` cannot take the socket is refused before any server starts, naming where it is defined."""
    try:
        inspect.signature(cls.serve).bind(None, "127.0.0.1", 0, None)  # self, host, port, sock: as main() calls it
    except TypeError:
        code = getattr(cls.serve, "__code__", None)
        where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        raise ConfigError(f"server '{spec.name}': {cls.__qualname__}.serve{where} must take `sock`, the socket "
                          f"ng_run holds for its port: def serve(self, host, port, sock=None), passing it on to "
                          f"super().serve(host, port, sock)") from None


def main() -> None:
    payload = orjson.loads(os.environ[SPEC_ENV])
    # A list: the servers that share this process (server/colocated.py).
    specs = [ServerSpec(**entry) for entry in payload] if isinstance(payload, list) else [ServerSpec(**payload)]
    for spec in specs:
        register_secrets(secret_values(spec.settings))
    try:
        configure_logging(",".join(spec.name for spec in specs),
                          level=server_settings(BaseServer, specs[0], unknown="ignore").log_level.upper())
        classes = [server_class(spec) for spec in specs]
    except ConfigError as exc:
        console.error(str(exc))
        sys.exit(2)
    head_url = os.environ.get(HEAD_URL_ENV)
    if len(specs) > 1:
        serve_together([cls(spec, head_url=head_url) for cls, spec in zip(classes, specs)])
        return
    spec, cls = specs[0], classes[0]
    server = cls(spec, head_url=head_url)
    host, port = server.settings.host, server.settings.port  # the supervisor has given every server its port
    assert port is not None, "the supervisor sets every server's port"
    if server.worker_count == 1:  # on a shared-port socket too: the supervisor holds the port until it stops
        server.serve(host, port, reuseport_socket(host, port))
        return
    # Each worker builds its own server object after the fork: nothing of one worker's state is shared.
    sys.exit(serve_workers(lambda sock: cls(spec, head_url=head_url).serve(host, port, sock), host, port,
                           server.worker_count))


if __name__ == "__main__":
    main()

"""A package's public names, imported on first use (PEP 562): a command that needs one module of a package does not
pay for the rest (the collector needs no web server, yet reads modules beside the servers')."""

import importlib
from typing import Any, Callable


def lazy_exports(package: str, modules: dict[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: each name of `modules` comes from the module named beside it."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__

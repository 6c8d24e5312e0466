"""Counting calls into methods, to prove a feature that is off does no work per request (and that the probes work)."""

from collections import Counter
from typing import Any, Callable

import pytest


def count_calls(monkeypatch: pytest.MonkeyPatch, probes: dict[str, tuple[Any, str]]) -> Counter[str]:
    """Wrap each `owner.method` of `probes` ({name: (owner, method)}) so that every call counts under its name."""
    counted: Counter[str] = Counter()

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return original(*args, **kwargs)
        return wrapper

    for name, (owner, method) in probes.items():
        monkeypatch.setattr(owner, method, counting(name, getattr(owner, method)))
    return counted

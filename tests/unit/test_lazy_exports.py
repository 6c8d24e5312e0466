"""Packages whose public names load on first use: ng_collect_rollouts loads neither a web server nor a model server's
code (those are ng_run's), and every name the packages export still resolves, each to its one definition."""

import importlib
import subprocess
import sys

import pytest

# Web servers, and the server code behind them: ng_run's processes load them, never the collector's.
SERVER_MODULES = ("uvicorn", "starlette", "nemo_gym.server.base", "nemo_gym.responses_api_models.endpoint_calls",
                  "nemo_gym.responses_api_models.vllm_model.app", "nemo_gym.resources_servers.base")
LAZY_PACKAGES = ("nemo_gym.server", "nemo_gym.resources_servers", "nemo_gym.rollout_collection")


def test_the_collector_loads_no_server_code() -> None:
    code = ("import sys, nemo_gym.cli.collect, nemo_gym.rollout_collection.collect\n"
            f"print(sorted(m for m in sys.modules if m.startswith({SERVER_MODULES!r})))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", f"the collector loads server code: {loaded}"


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_exported_name_resolves_to_its_definition(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        home = importlib.import_module(value.__module__)
        assert getattr(home, value.__name__, None) is value, f"{package}.{name} is not its definition"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import nemo_gym.server

    with pytest.raises(AttributeError, match="nemo_gym.server.*no attribute 'BaseSever'"):
        nemo_gym.server.BaseSever  # noqa: B018 (a typo'd name)

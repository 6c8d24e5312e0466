"""A public function whose name says it runs asynchronously (`run_async...`, `async_...`, `..._async`) is a coroutine
function: `rollout_collection.run_async` was the blocking `run_sync` under another name (a caller awaiting it got a
TypeError). The one exception is NeMo RL's own name, kept as NeMo RL defines it."""

import importlib
import inspect

import pytest

PACKAGES = ("nemo_gym.rollout_collection", "nemo_gym.experience", "nemo_gym.experience.rollouts",
            "nemo_gym.experience.rollout_manager", "nemo_gym.sync_bridge", "nemo_gym.http_client")
# NeMo RL's run_async_multi_turn_rollout blocks: it runs each sample's turn loop concurrently inside one call.
NEMO_RL_BLOCKING = {"run_async_multi_turn_rollout"}


def _says_async(name: str) -> bool:
    return name.startswith(("run_async", "async_")) or name.endswith("_async")


@pytest.mark.parametrize("package", PACKAGES)
def test_functions_named_async_are_coroutine_functions(package: str) -> None:
    module = importlib.import_module(package)
    names = getattr(module, "__all__", [name for name in vars(module) if not name.startswith("_")])
    misnamed = [name for name in names if _says_async(name) and name not in NEMO_RL_BLOCKING
                and inspect.isfunction(getattr(module, name)) and not inspect.iscoroutinefunction(getattr(module, name))]
    assert not misnamed, f"{package} exports blocking functions under async names: {misnamed}"

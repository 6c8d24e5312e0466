"""nemo_gym.config is the bottom layer: the servers and everything above read it, never the other way round.
It imports only itself and the two leaves below it (nemo_gym.errors, nemo_gym.loopback), at module level or inside a
function."""

import ast
from pathlib import Path

import nemo_gym.config

BELOW_CONFIG = ("nemo_gym.config", "nemo_gym.errors", "nemo_gym.loopback")


def _imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module if node.level == 0 else "nemo_gym.config" + (f".{node.module}" if node.module else "")
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from nemo_gym import server` too
    return found


def test_config_imports_nothing_above_it() -> None:
    package = Path(nemo_gym.config.__file__).parent
    upward = {f"{path.name} imports {module}" for path in package.rglob("*.py") for module in _imported_modules(path)
              if (module == "nemo_gym" or module.startswith("nemo_gym."))
              and not any(module == below or module.startswith(f"{below}.") for below in BELOW_CONFIG)}
    assert not upward, sorted(upward)

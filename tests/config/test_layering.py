"""nemo_gym.config sits below the servers: nemo_gym.server reads it, never the other way round."""

import ast
from pathlib import Path

import nemo_gym.config

SERVER_LAYER = "nemo_gym.server"


def _imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module if node.level == 0 else "nemo_gym.config" + (f".{node.module}" if node.module else "")
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from nemo_gym import server` too
    return found


def test_config_never_imports_the_server_layer() -> None:
    package = Path(nemo_gym.config.__file__).parent
    upward = {f"{path.name} imports {module}" for path in package.rglob("*.py") for module in _imported_modules(path)
              if module == SERVER_LAYER or module.startswith(f"{SERVER_LAYER}.")}
    assert not upward, sorted(upward)

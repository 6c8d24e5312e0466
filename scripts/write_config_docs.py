"""Regenerate the option tables of docs/configuration.md from the typed settings (tests/config/test_docs.py fails
when the page and the settings disagree).

    PYTHONPATH=. python scripts/write_config_docs.py
"""

import importlib
import re
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from nemo_gym.config.help import markdown_table  # noqa: E402
from nemo_gym.config.servers import SERVER_KINDS, ServerSpec  # noqa: E402
from nemo_gym.server.launch import server_class  # noqa: E402

DOC = REPO_ROOT / "docs" / "configuration.md"
BLOCK = re.compile(r"(<!-- BEGIN generated (\S+) -->\n).*?(<!-- END generated \2 -->)", re.S)


def commands() -> dict[str, str]:
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    blocks = {}
    for command, target in sorted(scripts.items()):
        command_help = importlib.import_module(target.split(":")[0]).HELP
        parts = [f"**{title}**\n\n{markdown_table(settings, prefix)}" for title, settings, prefix in command_help.options]
        if command_help.notes:
            parts.append(command_help.notes.strip())
        blocks[command] = "\n\n".join(parts) or "No options."
    return blocks


def servers() -> dict[str, str]:
    blocks = {}
    for kind in SERVER_KINDS:
        for app in sorted((REPO_ROOT / "nemo_gym" / kind).glob("*/app.py")):
            cls = server_class(ServerSpec("doc", kind, app.parent.name, {}))
            blocks[f"{kind}.{app.parent.name}"] = markdown_table(cls.Settings)
    return blocks


def generated() -> dict[str, str]:
    return {**commands(), **servers()}


def block_names(text: str) -> list[str]:
    return [match.group(2) for match in BLOCK.finditer(text)]


def render(text: str, blocks: dict[str, str]) -> str:
    return BLOCK.sub(lambda m: f"{m.group(1)}{blocks[m.group(2)]}\n{m.group(3)}", text)


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text(), generated()))
    print(f"wrote {DOC}")

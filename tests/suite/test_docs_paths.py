"""Every path and command README.md and docs/ send a newcomer to exists and runs: repository paths named in code
spans, code blocks and links exist (those under git-ignored folders are what a command writes, and globs must match
something), and each `ng_*` command they name answers `--help` and `--version` (the cheap commands)."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers.stack import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
TOP_LEVEL = ("nemo_gym", "configs", "benchmarks", "scripts", "docs", "tests", "data", "img", ".ci")
# A path-looking token: starts at a top-level folder, runs over path characters.
PATH = re.compile(r"(?<![\w./-])((?:\.ci|nemo_gym|configs|benchmarks|scripts|docs|tests|data|img)/[\w./*<>{}-]*\w)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
COMMAND = re.compile(r"(?<![\w/.-])(ng_[a-z_]+)\b")
SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]


# Names that are not our console scripts, and where they are real: a shell function of the Slurm job scripts, and
# NeMo Gym 0.4.0's command that the compatibility notes compare with.
NOT_COMMANDS = {"ng_start_servers": REPO_ROOT / "nemo_gym/slurm/job_scripts/common.sh",
                "ng_reward_profile": REPO_ROOT / "docs/compatibility-data.md", "ng_logs": REPO_ROOT / ".gitignore"}


def _ignored(path: str) -> bool:
    """Under a git-ignored folder: what a command writes (results/, a prepared benchmark's data/)."""
    return any(subprocess.run(["git", "check-ignore", "-q", "--no-index", candidate], cwd=REPO_ROOT).returncode == 0
               for candidate in (path, path + "/"))


def _missing(page: Path) -> list[str]:
    text = page.read_text()
    base = page.parent
    missing = []
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if any(mark in path for mark in "<>{}") or _ignored(path):
            continue  # a placeholder (<name>), or what a command writes
        # Relative to the checkout, or to the page (docs/img/...).
        if not any(list(root.glob(path)) if "*" in path else (root / path).exists() for root in (REPO_ROOT, base)):
            missing.append(path)
    for match in LINK.finditer(text):
        target = match.group(1)
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        if not (base / target).exists():
            missing.append(f"link {target}")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_path_a_page_names_exists(page: Path) -> None:
    assert _missing(page) == []


def test_every_named_command_exists_and_answers_help_and_version() -> None:
    named = {cmd for page in PAGES for cmd in COMMAND.findall(page.read_text())}
    unknown = sorted(named - set(SCRIPTS) - set(NOT_COMMANDS))
    assert unknown == [], f"pages name commands that do not exist: {unknown}"
    assert all(name in where.read_text() for name, where in NOT_COMMANDS.items())
    code = "\n".join([
        "import importlib, io, sys, contextlib",
        f"scripts = {dict((c, SCRIPTS[c]) for c in sorted(named & set(SCRIPTS)))!r}",
        "for command, target in scripts.items():\n"
        "    module, function = target.split(':')\n"
        "    for flag in ('--help', '--version'):\n"
        "        sys.argv = [command, flag]\n"
        "        out = io.StringIO()\n"
        "        with contextlib.redirect_stdout(out):\n"
        "            try:\n"
        "                getattr(importlib.import_module(module), function)()\n"
        "            except SystemExit as stop:\n"
        "                assert stop.code == 0, (command, flag, stop.code)\n"
        "        assert command in out.getvalue(), (command, flag)\n"
        "print(len(scripts))",
    ])
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) >= 8  # the pages do name the commands


def test_env_yaml_is_ignored_and_the_shipped_example_loads(tmp_path: Path) -> None:
    assert subprocess.run(["git", "check-ignore", "-q", "--no-index", "env.yaml"], cwd=REPO_ROOT).returncode == 0
    (tmp_path / "env.yaml").write_text((REPO_ROOT / "env.yaml.example").read_text())
    from nemo_gym.config import load_global_config

    model = load_global_config(["+config_paths=[configs/vllm_model.yaml]"], cwd=tmp_path).values["policy_model"]
    assert model["responses_api_models"]["vllm_model"]["base_url"] == "http://127.0.0.1:8000/v1"
    assert "env.yaml.example" in (REPO_ROOT / "README.md").read_text()


def test_readme_stays_short() -> None:
    assert len((REPO_ROOT / "README.md").read_text().splitlines()) < 250

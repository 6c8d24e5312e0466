"""`--help`/`-h` of every console script in pyproject.toml: each typed option with its type and default, exit 0."""

import importlib
import os
import subprocess
import sys
import tomllib

import pytest

from nemo_gym.config.help import field_docs
from tests.helpers.stack import REPO_ROOT

SCRIPTS: dict[str, str] = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def _entry_point(command: str):
    module_name, function = SCRIPTS[command].split(":")
    module = importlib.import_module(module_name)
    return module, getattr(module, function)


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_help_lists_every_option(command: str, flag: str, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture) -> None:
    module, main = _entry_point(command)
    monkeypatch.setattr(sys, "argv", [command, "+some=option", flag])  # --help wins over anything else
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr()
    assert exit_.value.code == 0 and out.err == ""
    command_help = module.HELP  # every command declares its typed options
    assert command_help.command == command
    # A command without options does not offer +key=value, nor say that every option is one.
    usage = f"usage: {command} [+key=value ...]\n" if command_help.options else f"usage: {command}\n"
    assert out.out.startswith(usage)
    assert ("Hydra-style override" in out.out) == bool(command_help.options)
    listed = [doc for _, settings, prefix in command_help.options for doc in field_docs(settings, prefix)]
    for doc in listed:
        assert f"  +{doc.name}  ({doc.type}; " in out.out, doc.name
    assert listed or "takes no options" in out.out


def test_installed_console_script_help(tmp_path) -> None:
    """The command a user types, as a process: no Hydra parse error, exit 0."""
    script = os.path.join(os.path.dirname(sys.executable), "ng_collect_rollouts")
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    assert "+num_samples_in_parallel  (an integer or null; default 256)" in done.stdout
    assert "+input_jsonl_fpath  (a string; required)" in done.stdout

"""ng_init_resources_server refuses bad input with one line and exit 2, and then leaves the disk untouched."""

from pathlib import Path

import pytest

from tests.scaffold.util import init_environment, ng


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"" for p in sorted(root.rglob("*"))}


def _refused(cwd: Path, args: list[str], message: str) -> None:
    before = _tree(cwd)
    result = ng("init_resources_server", args, cwd)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert _tree(cwd) == before


@pytest.mark.parametrize("name", ["1env", "my-env", "my env", "class", "_hidden", "", "'ünïcode'", "123"])
def test_a_name_that_is_no_identifier_is_refused(tmp_path: Path, name: str) -> None:
    _refused(tmp_path, [f"+name={name}"], "must be a Python identifier starting with a letter")


@pytest.mark.parametrize("name", ["math", "example_single_tool_call", "number_guess"])
def test_the_name_of_a_built_in_environment_is_refused(tmp_path: Path, name: str) -> None:
    _refused(tmp_path, [f"+name={name}"], f"nemo_gym already has an environment named '{name}'")


def test_an_existing_environment_is_never_overwritten(tmp_path: Path) -> None:
    init_environment(tmp_path, "+name=my_env")
    (tmp_path / "resources_servers" / "my_env" / "app.py").write_text("# my own work\n")
    _refused(tmp_path, ["+name=my_env"], "resources_servers/my_env already exists; refusing to overwrite it")
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "other").write_text("a file, not a folder\n")
    _refused(tmp_path, ["+name=other", "+output_dir=envs"], "envs/other already exists")


@pytest.mark.parametrize("args, message", [
    ([], "missing +name=..."),
    (["+name=my_env", "+outputdir=x"], "unknown option +outputdir=..."),
    (["+name=my_env", "+output_dir=a_file"], "+output_dir=a_file is a file, not a folder"),
    (["name=[unclosed"], "cannot parse command-line override"),
])
def test_bad_options_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "a_file").write_text("x\n")
    _refused(tmp_path, args, message)

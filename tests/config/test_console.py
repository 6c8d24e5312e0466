"""One owner of what a command prints (nemo_gym/console.py): each kind of line goes where docs/architecture.md says
("Console output"), every command's failing run says why on standard error alone, and no module of the package
prints but through it (the collector's progress bar, which draws on the stream it is given, excepted)."""

import re
import sys
import tomllib

import pytest

from nemo_gym import console
from tests.config.test_help import _entry_point
from tests.helpers.stack import REPO_ROOT

SCRIPTS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
# Modules that print on their own, and why (docs/architecture.md, "Console output").
OWN_PRINTERS = {
    "nemo_gym/console.py": "the owner",
    "nemo_gym/rollout_collection/progress.py": "the collector's progress bar, on the stream the run gives it",
    "nemo_gym/responses_api_models/local_vllm_model/vllm_main.py": "runs inside vLLM's process, before nemo_gym",
}


def test_each_kind_of_line_goes_where_the_docs_say(capsys: pytest.CaptureFixture, monkeypatch) -> None:
    monkeypatch.delenv(console.VERBOSITY_ENV, raising=False)
    console.say("collected")
    console.warn("a thing to know")
    console.error("why it stopped")
    console.progress("[job] 1/2")
    console.emit("TABLE")
    console.detail("only when verbose")
    out = capsys.readouterr()
    assert out.out == "collected\nTABLE\n"
    assert out.err == "warning: a thing to know\nerror: why it stopped\n[job] 1/2\n"
    table = (REPO_ROOT / "docs" / "architecture.md").read_text()
    for row in ("| `say` | standard output |", "| `warn` | standard error |", "| `error` | standard error |",
                "| `progress` | standard error |", "| `emit` | standard output |", "| `detail` | standard error |"):
        assert row in table, row


@pytest.mark.parametrize(("level", "out", "err"), [
    ("quiet", "TABLE\n", "warning: w\nerror: e\n"),
    ("verbose", "said\nTABLE\n", "warning: w\nerror: e\n[p]\nd\n"),
])
def test_verbosity_drops_or_adds_lines_but_never_warnings_errors_or_output(level: str, out: str, err: str,
                                                                           capsys, monkeypatch) -> None:
    monkeypatch.setenv(console.VERBOSITY_ENV, level)
    console.say("said")
    console.warn("w")
    console.error("e")
    console.progress("[p]")
    console.emit("TABLE")
    console.detail("d")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (out, err)


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_a_failing_run_says_why_on_standard_error_alone(command: str, monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)  # no env.yaml or config of the checkout's is read
    _, main = _entry_point(command)
    args = ["+head_server_url=http://127.0.0.1:1"] if command == "ng_status" else ["+zzz_not_an_option=1"]
    monkeypatch.setattr(sys, "argv", [command, *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr()
    assert exit_.value.code not in (0, None)
    assert out.out == ""
    assert out.err.startswith("error: ") and out.err.count("\n") == 1, out.err


def test_no_module_prints_but_through_the_owner() -> None:
    printing = sorted(str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "nemo_gym").rglob("*.py")
                      if "tests" not in path.parts and re.search(r"(?<![\w.])print\(", path.read_text()))
    assert printing == sorted(OWN_PRINTERS)

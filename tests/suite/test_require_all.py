"""NEMO_GYM_REQUIRE_ALL (set by .ci/run) turns every skip into a failure (a module skipped while being collected
and a missing requirement inside an xfail test included); gpu tests are deselected and listed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.model import has_cuda
from tests.helpers.stack import REPO_ROOT

SAMPLE = '''
import pytest
from tests.helpers.requirements import require, require_module

def test_needs_a_widget():
    require(False, "no widget on this machine")

def test_needs_a_module():
    require_module("no_such_module_for_nemo_gym")

def test_plain_skip():
    pytest.skip("skipped the old way")

@pytest.mark.xfail(strict=True)
def test_expected_failure():
    assert False

@pytest.mark.xfail(reason="an xfail mark must not hide a missing requirement")
def test_xfail_needing_a_gadget():
    require(False, "no gadget on this machine")

def test_has_what_it_needs():
    require(True, "unused")

@pytest.mark.gpu
def test_on_a_gpu():
    pass
'''

# Modules that skip while being collected: none of their tests runs, so under the variable each is an error.
SKIPPED_MODULES = {
    "test_skips_itself.py": 'import pytest\npytest.skip("no cluster here", allow_module_level=True)\n'
                            "def test_never_collected():\n    pass\n",
    "test_imports_or_skips.py": 'import pytest\npytest.importorskip("no_such_module_for_nemo_gym")\n'
                                "def test_never_collected():\n    pass\n",
    "test_requires_at_import.py": "from tests.helpers.requirements import require\n"
                                  'require(False, "no scheduler here")\n'
                                  "def test_never_collected():\n    pass\n",
}


def _pytest(tmp_path: Path, require_all: str | None, files: dict[str, str]) -> subprocess.CompletedProcess:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "NEMO_GYM_REQUIRE_ALL"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    if require_all is not None:
        env["NEMO_GYM_REQUIRE_ALL"] = require_all
    # The project's conftest as a plugin, on a file outside the tree, with the flags scripts/test.sh uses.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "-rfEs",
         "-W", "ignore::pytest.PytestUnknownMarkWarning", *sorted(files)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def _gpu_line(out: str) -> None:
    if has_cuda():
        assert "DESELECTED" not in out
    else:
        assert "1 test(s) marked gpu deselected" in out and "DESELECTED (gpu, no CUDA) test_sample.py::test_on_a_gpu" in out


@pytest.mark.parametrize("value", [None, "0"])
def test_without_the_variable_skips_are_skips_with_reasons(tmp_path: Path, value: str | None) -> None:
    done = _pytest(tmp_path, value, {"test_sample.py": SAMPLE, **SKIPPED_MODULES})
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "7 skipped" in out and "1 xfailed" in out and "1 passed" in out, out
    assert "SKIPPED [1] test_sample.py:6: no widget on this machine" in out, out
    assert "SKIPPED [1] test_sample.py:9: no_such_module_for_nemo_gym is not importable" in out
    assert "SKIPPED [1] test_sample.py:12: skipped the old way" in out
    assert "SKIPPED [1] test_sample.py:20: no gadget on this machine" in out
    assert "SKIPPED [1] test_skips_itself.py:2: no cluster here" in out
    assert "SKIPPED [1] test_imports_or_skips.py:2: could not import 'no_such_module_for_nemo_gym'" in out
    assert "SKIPPED [1] test_requires_at_import.py:2: no scheduler here" in out
    _gpu_line(out)


def test_under_require_all_every_skip_fails(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "1", {"test_sample.py": SAMPLE})
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "4 failed" in out and "1 xfailed" in out and "1 passed" in out and "skipped" not in out.split("\n")[-2]
    assert "missing requirement: no widget on this machine (NEMO_GYM_REQUIRE_ALL=1 makes this a failure)" in out
    assert "FAILED test_sample.py::test_xfail_needing_a_gadget" in out
    assert "missing requirement: no gadget on this machine (NEMO_GYM_REQUIRE_ALL=1 makes this a failure)" in out
    assert "missing requirement: no_such_module_for_nemo_gym is not importable" in out
    assert "NEMO_GYM_REQUIRE_ALL=1 allows no skips: skipped the old way" in out
    _gpu_line(out)


def test_under_require_all_a_module_skipped_while_collected_is_an_error(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "1", SKIPPED_MODULES)
    out = done.stdout
    assert done.returncode == 2, out + done.stderr  # pytest's "interrupted": collection errors stop the run
    assert "Interrupted: 3 errors during collection" in out and out.splitlines()[-1].startswith("3 errors in "), out
    assert ("test_skips_itself.py skipped while being collected, and NEMO_GYM_REQUIRE_ALL=1 allows no skips: "
            "no cluster here") in out
    assert ("test_imports_or_skips.py skipped while being collected, and NEMO_GYM_REQUIRE_ALL=1 allows no skips: "
            "could not import 'no_such_module_for_nemo_gym'") in out
    assert "missing requirement: no scheduler here (NEMO_GYM_REQUIRE_ALL=1 makes this a failure)" in out

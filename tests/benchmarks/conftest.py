"""The scratch repository root the e2e tests of benchmark datasets share."""

from pathlib import Path

import orjson
import pytest

from tests.benchmarks.util import ARITHMETIC_DATA, copy_benchmark, prepare_cli
from tests.collection.util import read_rows


@pytest.fixture
def arithmetic_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Path:
    """The current directory: a scratch repository root with the arithmetic benchmark prepared (2 problems per
    level, 8 rows), the same rows without their input in `bare.jsonl`, and `prompt.yaml` to build that input."""
    copy_benchmark("arithmetic", tmp_path)
    monkeypatch.chdir(tmp_path)
    prepare_cli(["+benchmark=arithmetic", "+n=2"], capsys)
    bare = [{k: v for k, v in row.items() if k != "responses_create_params"} for row in read_rows(ARITHMETIC_DATA)]
    Path("bare.jsonl").write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in bare))
    Path("prompt.yaml").write_text('system: "You are a calculator."\nuser: "Compute: {question}"\n')
    return tmp_path

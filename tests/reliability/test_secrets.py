"""The policy api key of the stack's config never leaves it: not through the head server, logs, process command
lines, manifests, outputs or sidecars, even when requests fail along the way."""

from pathlib import Path

import httpx
import pytest

from tests.collection.util import read_rows, run_cli, sidecar
from tests.reliability.conftest import SECRET, ReliabilityStack, write_weather_rows

ROWS = 60


def _files_holding(root: Path, secret: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


@pytest.mark.timeout(90)
def test_policy_api_key_is_never_written_or_served(faults_off: ReliabilityStack, tmp_path: Path) -> None:
    head = faults_off.stack.head_url
    served = httpx.get(f"{head}/global_config", trust_env=False)
    assert served.status_code == 200 and SECRET not in served.text
    config = served.json()
    assert config["policy_api_key"] == "***REDACTED***"
    assert config["policy_model"]["responses_api_models"]["vllm_model"]["api_key"] == "***REDACTED***"
    assert SECRET not in httpx.get(f"{head}/servers", trust_env=False).text

    write_weather_rows(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "r.jsonl"
    faults_off.proxy.rate = 0.3  # failures and retries exercise the error and logging paths too
    result = run_cli("collect", faults_off.args(f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}",
                                                f"+output_jsonl_fpath={out}", "+max_attempts=1",
                                                "+rollout_timeout_s=1.5"), tmp_path, timeout=60)
    faults_off.proxy.rate = 0.0
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert SECRET not in result.stdout + result.stderr
    # The stub answers 401 to any other key: a reward of 1 proves the secret was used where it belongs.
    assert any(row["reward"] == 1.0 for row in read_rows(out))
    for suffix in ("_manifest.json", "_materialized_inputs.jsonl"):
        assert sidecar(out, suffix).exists()

    logs = list((faults_off.workdir / "ng_logs").glob("*.log")) + [faults_off.stack.log_path]
    assert len(logs) >= 5 and all(log.stat().st_size for log in logs)
    # The user's own config file is where the key belongs; finding it there also proves the grep works.
    assert _files_holding(faults_off.workdir, SECRET.encode()) == [faults_off.workdir / "model.yaml"]
    assert _files_holding(tmp_path, SECRET.encode()) == []

    stack_pid = faults_off.stack.popen.pid
    children = Path(f"/proc/{stack_pid}/task/{stack_pid}/children").read_text().split()
    for pid in [stack_pid, *map(int, children)]:
        assert SECRET.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()

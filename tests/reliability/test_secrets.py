"""The policy api key of the stack's config never leaves it: not through the head server, logs, process command
lines, manifests, outputs or sidecars, even when requests fail along the way; and only the servers configured with
it hold it in their environment (their spec travels there)."""

from pathlib import Path

import httpx
import orjson
import psutil
import pytest

from nemo_gym.server.launch import SPEC_ENV
from tests.collection.util import read_rows, run_cli, sidecar
from tests.reliability.apps.fault_proxy import FAULTS
from tests.reliability.conftest import SECRET, ReliabilityStack, write_weather_rows

ROWS = 60
# One fault of each kind on the first model call of rows 0-9, each kind twice: retries, truncated replies and
# hangs run the error and logging paths. vllm_model retries every kind, but a hang holds its call for its 2 s read
# timeout, past the 1.5 s rollout deadline: rows 3 and 8 fail by construction.
PLAN = {row: FAULTS[row % len(FAULTS)] for row in range(10)}
HANGS = {row for row, fault in PLAN.items() if fault == "hang"}
# The servers whose config holds the key: vllm_model (it sends it) and the stub (it checks it).
HOLDERS = {"policy_model", "chat_stub"}


def _holder_name(environ: bytes) -> str:
    """The server a process's environment belongs to (its spec's name), or "ng_run" for a process without one."""
    prefix = f"{SPEC_ENV}=".encode()
    spec = next((v[len(prefix):] for v in environ.split(b"\0") if v.startswith(prefix)), None)
    return "ng_run" if spec is None else orjson.loads(spec)["name"]


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
    faults_off.proxy.plan, faults_off.proxy.injected_keys = dict(PLAN), {}
    result = run_cli("collect", faults_off.args(f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}",
                                                f"+output_jsonl_fpath={out}", "+max_attempts=1",
                                                "+num_samples_in_parallel=8", "+rollout_timeout_s=1.5"),
                     tmp_path, timeout=60)
    assert faults_off.proxy.injected_keys == PLAN, f"planned {PLAN}, injected {faults_off.proxy.injected_keys}"
    assert result.returncode == 1, result.stdout + result.stderr  # the hung rollouts failed
    failed = {f["_ng_task_index"]: f["failure_class"] for f in read_rows(sidecar(out, "_failures.jsonl"))}
    assert {row: failed.get(row) for row in HANGS} == {row: "timeout" for row in HANGS}, failed
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

    stack = psutil.Process(faults_off.stack.popen.pid)
    holders = set()
    for proc in [stack, *stack.children(recursive=True)]:
        assert SECRET.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes(), proc.cmdline()
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        if SECRET.encode() in environ:
            holders.add(_holder_name(environ))
    assert holders == HOLDERS

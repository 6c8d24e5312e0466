"""A replica that fails fast beside a real vLLM, through the real stack (ng_collect_rollouts -> math_simple_agent ->
math environment -> vllm_model): the sick one (a gateway answering every generation 502 at once while /v1/models
answers) is ejected, every rollout is collected once on the healthy replica, and none fails.

Before outlier ejection the sick replica, with the fewest requests in flight, got every new session, and the run
stopped on its failure budget. benchmarks/perf/sick_replica.py measures the same at 360 rows, with the throughput."""

from pathlib import Path

import orjson
import pytest

from benchmarks.perf.harness import run_collector
from benchmarks.perf.sick_replica import (
    MATH_AGENT,
    FailingGateway,
    check_exactly_once,
    math_stack,
    replica_states,
    write_math_rows,
)
from tests.helpers.model import VLLMServer

ROWS = 60


@pytest.mark.vllm
def test_a_replica_that_fails_fast_is_ejected_and_costs_no_rollout(vllm_server: VLLMServer, tmp_path: Path) -> None:
    rows = write_math_rows(tmp_path / "rows.jsonl", ROWS)
    output = tmp_path / "rollouts.jsonl"
    with FailingGateway(vllm_server.model) as gateway:
        with math_stack(tmp_path / "stack", [vllm_server.base_url, gateway.base_url], vllm_server.model) as stack:
            # run_collector fails on any failed rollout. At most 16 in flight: the sessions that start before the
            # first failure can be known are shared by both replicas whatever the router does (a run this short
            # starts with all its rollouts at once, up to the ceiling).
            result = run_collector(stack, rows, output, MATH_AGENT, 16, "+responses_create_params.max_output_tokens=16",
                                   timeout_s=600)
            healthy, sick = replica_states(stack)
    assert result["succeeded"] == ROWS and result["failed"] == 0
    check_exactly_once(output, ROWS)
    assert sick["ejections"] >= 1 and sick["answered"] == 0
    assert sick["failures"] == {"http_5xx": gateway.requests["POST /v1/chat/completions"]}
    # Ejected, it takes only probes: far less than the half of the sessions that least-loaded routing gives it.
    assert sick["requests"] < ROWS // 2
    assert healthy["answered"] >= ROWS and healthy["ejections"] == 0
    # The progress file shows the same, per replica, as the collector last read it (at the run's end).
    progress = orjson.loads((tmp_path / "rollouts_progress.json").read_bytes())
    shown = {replica["endpoint"]: replica for replica in progress["replicas"]["policy_model"]}
    assert shown[sick["endpoint"]]["ejections"] == sick["ejections"]
    assert shown[sick["endpoint"]]["failures"] == sick["failures"]

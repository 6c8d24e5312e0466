"""A rollout retried after a failed attempt is still one span: its attempts, its reward, and one event per failed
attempt naming its failure class (and nothing of the row's prompt)."""

import asyncio
from typing import Any

from nemo_gym.config.traces import TracesSettings
from nemo_gym.http_client import HttpClient
from nemo_gym.rollout_collection.rollout import RolloutPolicy, RolloutSuccess, run_rollout
from nemo_gym.traces import names, start
from tests.collection.inprocess_stack import InProcessStack, rollout
from tests.traces.otlp_receiver import OtlpReceiver

ROW = {"_ng_task_index": 3, "_ng_rollout_index": 1, "agent_ref": {"name": "fake_agent"},
       "responses_create_params": {"input": "a secret prompt"}}
TIMEOUT_S = 1.0


def test_a_retried_rollout_is_one_span_with_an_event_per_failed_attempt() -> None:
    answers: list[dict[str, Any]] = []

    async def first_too_late(row: dict[str, Any]) -> dict[str, Any]:
        answers.append(row)
        if len(answers) == 1:
            await asyncio.sleep(2 * TIMEOUT_S)  # past the attempt's deadline: a timeout, which is retried
        return await rollout(row)

    async def run() -> Any:
        http = HttpClient()
        try:
            async with InProcessStack(on_run=first_too_late) as stack:
                return await run_rollout(http, f"{stack.url}/run", ROW, RolloutPolicy(2, TIMEOUT_S, 0.0))
        finally:
            await http.aclose()

    with OtlpReceiver() as receiver:
        start.start_tracing(TracesSettings(otlp_endpoint=receiver.url), "ng_collect_rollouts")
        try:
            outcome = asyncio.run(run())
        finally:
            start.stop_tracing()
        (span,) = receiver.received()
    assert isinstance(outcome, RolloutSuccess) and outcome.attempts == 2
    assert span.name == "rollout fake_agent" and span.parent_span_id == "" and span.status_code == 0
    assert span.attributes == {names.AGENT_NAME: "fake_agent", names.TASK_INDEX: 3, names.ROLLOUT_INDEX: 1,
                               names.ATTEMPTS: 2, names.REWARD: 1.0}
    assert span.events == [(names.ATTEMPT_FAILED, {names.ATTEMPT: 1, names.ERROR_TYPE: "timeout"})]

"""Reward from a judge model: `judge_model_server` names a model server of the config (vllm_model over a local vLLM,
local_vllm_model, openai_model over a hosted API), called at its /v1/responses; keep it distinct from the policy.

Modes and the strict verdict rule are in `verdict.py`. In `equivalence` mode (the default) the answer (the final
message) is compared with the row's `expected_answer` in both orders, and the reward is 1.0 only when both verdicts
say equivalent; `judge_expected_first` and `judge_answer_first` record each order's verdict and `judge_orders_agree`
whether they agreed (their means in the metrics show a position bias). In `correctness` mode one call decides.

A judge call that fails (the server is down, times out, answers an error) or answers without a verdict makes the
verification fail: `verify` returns `failed_verification` with class `judge_error`, so the rollout is recorded as
failed with its response kept (never scored, outside every reward metric) and `ng_reverify_rollouts
+failed_only=true` can judge it again once the judge is back. An empty answer, or one that holds a verdict label
(an attempt to speak for the judge), scores 0.0 without a call. `judge_evaluations` keeps each call's prompt order,
text and verdict.
"""

import asyncio
from typing import Any

from pydantic import Field, model_validator

from nemo_gym.errors import DownstreamError, NemoGymError
from nemo_gym.failures import FailureClass
from nemo_gym.protocol import content_to_chat, final_message_text, output_text
from nemo_gym.resources_servers.base import ResourcesServer, ResourcesSettings, failed_verification
from nemo_gym.resources_servers.judge.verdict import MODES, Mode, check_labels, check_template, parse_verdict
from nemo_gym.server.base import HandlerError, ModelServerRef

EXPECTED = "expected_answer"


class JudgeSettings(ResourcesSettings):
    judge_model_server: ModelServerRef
    """The judge: a model server of the config ({type: responses_api_models, name: ...}), not the policy."""
    mode: Mode = "equivalence"
    """equivalence: the answer against expected_answer, asked in both orders; correctness: one verdict on the answer."""
    prompt_template: str | None = None
    """The judge's prompt, with the mode's {placeholders} (default: the mode's own, see verdict.py)."""
    positive_label: str | None = None
    """The verdict that scores 1 (default: [[A=B]] in equivalence mode, [[CORRECT]] in correctness mode)."""
    negative_label: str | None = None
    """The verdict that scores 0 (default: [[A!=B]], [[INCORRECT]])."""
    judge_create_params: dict[str, Any] = Field(default_factory=lambda: {"temperature": 0.0,
                                                                          "max_output_tokens": 256})
    """Responses create params of each judge call (besides its input)."""
    judge_timeout_s: float = Field(120.0, gt=0)
    """Seconds one judge call may take."""

    @model_validator(mode="after")
    def _usable(self) -> "JudgeSettings":
        check_template(self.mode, self.template)
        check_labels(self.positive, self.negative)
        if "input" in self.judge_create_params:
            raise ValueError("judge_create_params must not set 'input': the prompt template makes it")
        return self

    @property
    def template(self) -> str:
        return self.prompt_template if self.prompt_template is not None else MODES[self.mode].template

    @property
    def positive(self) -> str:
        return self.positive_label if self.positive_label is not None else MODES[self.mode].positive

    @property
    def negative(self) -> str:
        return self.negative_label if self.negative_label is not None else MODES[self.mode].negative


class JudgeFailed(Exception):
    """A judge call that gave no verdict: the call failed, or its text held none."""


def question_of(row: dict[str, Any]) -> str:
    """The row's `question`, else the text of the last user message of its input."""
    if isinstance(row.get("question"), str):
        return row["question"]
    items = (row.get("responses_create_params") or {}).get("input")
    if isinstance(items, str):
        return items
    users = [item for item in items or [] if isinstance(item, dict) and item.get("role") == "user"]
    text = content_to_chat(users[-1].get("content")) if users else ""
    return text if isinstance(text, str) else ""


class JudgeResourcesServer(ResourcesServer):
    Settings = JudgeSettings
    settings: JudgeSettings

    async def ask_judge(self, prompt: str) -> str:
        """The judge model's text for `prompt` (one call to its /v1/responses); JudgeFailed if the call fails."""
        params = {**self.settings.judge_create_params, "input": [{"role": "user", "content": prompt}]}
        try:
            response = await self.servers.post(self.settings.judge_model_server.name, "/v1/responses", params,
                                               timeout_s=self.settings.judge_timeout_s)
        except (DownstreamError, NemoGymError) as exc:
            raise JudgeFailed(f"the judge call failed: {exc}") from None
        if not isinstance(response, dict) or not isinstance(response.get("output"), list):
            raise JudgeFailed("the judge answered without a Responses object")
        return output_text(response)

    async def _verdict(self, order: str, prompt: str) -> dict[str, Any]:
        text = await self.ask_judge(prompt)
        verdict = parse_verdict(text, self.settings.positive, self.settings.negative)
        evaluation = {"order": order, "text": text, "verdict": verdict}
        if verdict is None:
            raise JudgeFailed(f"the judge gave no verdict ({order}): exactly one of {self.settings.positive} and "
                              f"{self.settings.negative} must occur once; it answered {text[:300]!r}")
        return evaluation

    def _prompts(self, row: dict[str, Any], answer: str) -> list[tuple[str, str]]:
        """(order, prompt) for each call this row needs."""
        fields: dict[str, str] = {"question": question_of(row), "answer": answer}
        expected = row.get(EXPECTED)
        if expected is not None:
            fields[EXPECTED] = str(expected)
        if self.settings.mode == "correctness":
            if f"{{{EXPECTED}}}" in self.settings.template and EXPECTED not in fields:
                raise HandlerError(400, f"the prompt template uses {{{EXPECTED}}} but the row has no '{EXPECTED}'")
            return [("single", self.settings.template.format_map(fields))]
        if EXPECTED not in fields:
            raise HandlerError(400, f"equivalence mode needs the row's '{EXPECTED}'")
        pairs = [("expected_first", fields[EXPECTED], answer), ("answer_first", answer, fields[EXPECTED])]
        return [(order, self.settings.template.format_map({**fields, "first_answer": first, "second_answer": second}))
                for order, first, second in pairs]

    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        answer = final_message_text(response).strip()
        prompts = self._prompts(row, answer)
        if not answer or self.settings.positive in answer or self.settings.negative in answer:
            skipped = "empty answer" if not answer else "the answer holds a verdict label"
            return {"judge_skipped": skipped, "judge_evaluations": [], "reward": 0.0}
        results = await asyncio.gather(*(self._verdict(order, prompt) for order, prompt in prompts),
                                       return_exceptions=True)
        failed = [result for result in results if isinstance(result, BaseException)]
        for error in failed:
            if not isinstance(error, JudgeFailed):
                raise error
        done = [result for result in results if not isinstance(result, BaseException)]
        if failed:
            return failed_verification(FailureClass.JUDGE_ERROR, "; ".join(map(str, failed)), judge_evaluations=done)
        verdicts = {evaluation["order"]: evaluation["verdict"] for evaluation in done}
        scores = {"judge_evaluations": done, "reward": 1.0 if all(verdicts.values()) else 0.0}
        if self.settings.mode == "equivalence":
            scores.update(judge_expected_first=verdicts["expected_first"], judge_answer_first=verdicts["answer_first"],
                          judge_orders_agree=verdicts["expected_first"] == verdicts["answer_first"])
        return scores

    def key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        """The mean reward with how often each order said equivalent and how often the orders agreed."""
        extra = ("mean/judge_expected_first", "mean/judge_answer_first", "mean/judge_orders_agree")
        return {**super().key_metrics(agent_metrics),
                **{key: agent_metrics[key] for key in extra if key in agent_metrics}}

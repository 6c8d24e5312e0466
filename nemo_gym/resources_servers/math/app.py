"""Reward 1.0 when the answer in the model's final message equals `expected_answer`, else 0.0.

The answer is extracted from the final message and compared by `verifier.py` (last `\\boxed{...}` or last number;
math_verify equivalence). math_verify is CPU-bound sympy work guarded by SIGALRM timeouts, which only work in a main
thread: it runs in a small process pool, off the event loop, with an outer timeout as a backstop.

Rows that carry a difficulty `level` (the arithmetic benchmark's) get a mean reward per level in the aggregate
metrics (`level_1/mean_reward`, ...) when the instance sets `per_level_metrics: true`: the metric needs every
compact row sent to this server, which a plain math run need not pay for.
"""

from typing import Any

from pydantic import Field

from nemo_gym.failures import FailureClass
from nemo_gym.protocol import final_message_text
from nemo_gym.resources_servers.base import ResourcesServer, ResourcesSettings
from nemo_gym.resources_servers.math.verifier import extract_answer
from nemo_gym.resources_servers.metrics import mean_reward_by
from nemo_gym.resources_servers.math.verify_pool import CHECK_TIMEOUT_S, VerifyPool, VerifyTimeoutError
from nemo_gym.server.base import HandlerError

LEVEL = "level"


class MathSettings(ResourcesSettings):
    verify_workers: int = Field(2, ge=1)
    """Processes running math_verify off the event loop."""
    verify_timeout_s: float = Field(CHECK_TIMEOUT_S, gt=0)
    """Backstop (seconds) over math_verify's own timeouts."""
    per_level_metrics: bool = False
    """Mean reward per row `level` in the aggregate metrics (needs every row sent to this server)."""


class MathResourcesServer(ResourcesServer):
    Settings = MathSettings
    settings: MathSettings

    async def startup(self) -> None:
        self._pool = VerifyPool(self.settings.verify_workers, self.settings.verify_timeout_s)
        # Start and warm every worker before the server takes requests.
        await self._pool.warm()

    async def shutdown(self) -> None:
        self._pool.shutdown(wait=False)

    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        if "expected_answer" not in row:
            raise HandlerError(400, "the row has no 'expected_answer'")
        extracted = extract_answer(final_message_text(response))
        if extracted is None:
            return {"extracted_answer": None, "reward": 0.0}
        try:
            correct = await self._pool.answers_match(extracted, str(row["expected_answer"]))
        except VerifyTimeoutError as exc:
            raise HandlerError(504, f"math_verify: {exc}", FailureClass.TIMEOUT) from None
        return {"extracted_answer": extracted, "reward": 1.0 if correct else 0.0}

    def needs_rows(self) -> bool:
        return self.settings.per_level_metrics

    def compute_metrics(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Mean reward and rollout count per `level`, over the rows that carry one (the library has the rest)."""
        return mean_reward_by(rows, LEVEL)

    def key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        per_level = {key: value for key, value in agent_metrics.items()
                     if key.startswith(f"{LEVEL}_") and key.endswith("/mean_reward")}
        return {**super().key_metrics(agent_metrics), **per_level}

"""MathEnvironment: one-turn math problems scored like NeMo RL's math environment.

Each sample's last assistant message is the answer: its last `\\boxed{...}`, else its last number, is checked against
`extra_env_info["ground_truth"]` (NeMo RL's key; `"expected_answer"`, the collection toolkit's, also works) with
math_verify. Reward 1.0 or 0.0, every sample terminates, the observation is
`{"role": "environment", "content": "Environment: correct"}` (or `incorrect`), metadata stays as it was (None).

math_verify guards its work with SIGALRM, which only works in a main thread, and is CPU-bound: the checks run in a
small spawn-context process pool (`nemo_gym.resources_servers.math.verify_pool`), never on the event loop, each under
`verify_timeout_s`. A sample without a ground truth or an assistant message, or a check that times out, raises
EnvironmentStepError naming the sample: it is never scored 0.

    with MathEnvironment(num_workers=2) as env:
        result = await env.step(message_logs, [{"ground_truth": "12"}, ...])
"""

import asyncio
from types import TracebackType
from typing import Any, Optional

from nemo_gym.experience.environments.interfaces import EnvironmentInterface, EnvironmentReturn
from nemo_gym.experience.environments.step_batch import check_batch, environment_return, last_assistant_content
from nemo_gym.experience.errors import EnvironmentStepError
from nemo_gym.resources_servers.math.verifier import extract_answer
from nemo_gym.resources_servers.math.verify_pool import CHECK_TIMEOUT_S, VerifyPool

GROUND_TRUTH_KEYS = ("ground_truth", "expected_answer")


def _ground_truth(info: Optional[dict[str, Any]], sample: int) -> str:
    for key in GROUND_TRUTH_KEYS:
        if isinstance(info, dict) and info.get(key) is not None:
            return str(info[key])
    raise EnvironmentStepError(
        f"sample {sample}: extra_env_info has no 'ground_truth' (or 'expected_answer'): {info!r}")


class MathEnvironment(EnvironmentInterface):
    def __init__(self, num_workers: int = 2, verify_timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self._pool = VerifyPool(num_workers, verify_timeout_s)

    async def _is_correct(self, answer: Optional[str], expected: str, sample: int) -> bool:
        if answer is None:
            return False
        try:
            return await self._pool.answers_match(answer, expected)
        except Exception as exc:  # timeout, a dead worker, a pool already shut down: the sample failed
            raise EnvironmentStepError(
                f"sample {sample}: checking answer {answer!r} against {expected!r} failed: "
                f"{type(exc).__name__}: {exc}") from exc

    async def step(self, message_log_batch: list[list[dict[str, str]]],
                   metadata: list[Optional[dict[str, Any]]]) -> EnvironmentReturn:
        check_batch(message_log_batch, metadata)
        expected = [_ground_truth(info, i) for i, info in enumerate(metadata)]
        answers = [extract_answer(last_assistant_content(log, i)) for i, log in enumerate(message_log_batch)]
        correct = await asyncio.gather(*(
            self._is_correct(answer, truth, i) for i, (answer, truth) in enumerate(zip(answers, expected))
        ))
        observations = [
            {"role": "environment", "content": "Environment: correct" if ok else "Environment: incorrect"}
            for ok in correct
        ]
        size = len(message_log_batch)
        return environment_return(observations, [None] * size, [1.0 if ok else 0.0 for ok in correct],
                                  [True] * size, answers)

    def shutdown(self) -> None:
        """Stop the verifier processes (waits for the one check each may be running)."""
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "MathEnvironment":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        self.shutdown()

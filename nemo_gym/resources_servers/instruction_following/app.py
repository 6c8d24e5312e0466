"""Reward 1.0 when the final message follows every instruction of the row, else 0.0 (all or nothing).

Rows carry IFEval's `instruction_id_list` and `kwargs` (see `instructions.py` for the kinds and `checks.py` for
each rule). `verify` adds the breakdown: `follow_instruction_list` (one bool per instruction, IFEval's field),
`num_instructions`, `num_followed` and `followed:<instruction id>` (1.0 or 0.0; an id listed twice must be followed
both times). An empty answer follows nothing.

The checks take time linear in the answer (checks.py), and a long answer, or a row whose case kinds ask langdetect
whether the answer is English, is checked in a worker thread, so a megabyte of degenerate text neither stalls the
server nor delays its other requests; a check that still runs past VERIFY_TIMEOUT_S fails the verification as
`judge_error` (verify_timeout), never as reward 0.

In the aggregate metrics, `mean/followed:<instruction id>` is how often that kind was followed where it was asked
(the per-instruction breakdown), and the key metrics add `instruction_level_accuracy` (followed instructions over
all instructions, IFEval's instruction-level figure) to the mean reward (its prompt-level figure).
"""

import asyncio
from functools import partial
from typing import Any

from nemo_gym.failures import FailureClass
from nemo_gym.protocol import final_message_text
from nemo_gym.resources_servers.base import ResourcesServer, ResourcesSettings, failed_verification
from nemo_gym.resources_servers.instruction_following import checks
from nemo_gym.resources_servers.instruction_following.instructions import InstructionError, checked_kwargs
from nemo_gym.server.base import HandlerError

FOLLOWED = "followed:"
# An answer up to this long is checked on the event loop (a few milliseconds at most); a longer one in a thread.
INLINE_CHARS = 10_000
# A megabyte is checked in well under a second; past this the verification fails rather than hold the rollout.
VERIFY_TIMEOUT_S = 10.0
VERIFY_TIMEOUT = "verify_timeout"


# The kinds whose text must also be English (IFEval's rule, `check_english`).
ENGLISH_KINDS = frozenset({"change_case:english_lowercase", "change_case:english_capital"})


def follow_instructions(text: str, instruction_ids: Any, kwargs_list: Any,
                        check_english: bool = True) -> list[tuple[str, bool]]:
    """(id, followed) per instruction of a row, in order; InstructionError for a row this cannot check."""
    if not isinstance(instruction_ids, list) or not instruction_ids:
        raise InstructionError("'instruction_id_list' must be a non-empty list of instruction ids")
    kwargs_list = [{}] * len(instruction_ids) if kwargs_list is None else kwargs_list
    if not isinstance(kwargs_list, list) or len(kwargs_list) != len(instruction_ids):
        raise InstructionError("'kwargs' must be a list with one object per entry of 'instruction_id_list'")
    checked = [checked_kwargs(instruction_id, kwargs) for instruction_id, kwargs in zip(instruction_ids, kwargs_list)]
    answered = bool(text.strip())
    return [(instruction.id, answered and instruction.check(text, **kwargs)
             and (not check_english or instruction.id not in ENGLISH_KINDS or checks.english(text)))
            for instruction, kwargs in checked]


class InstructionFollowingSettings(ResourcesSettings):
    check_english: bool = True
    """change_case:english_lowercase and english_capital also ask langdetect whether the answer is English, as IFEval
    does; false checks the casing alone (langdetect reads many texts in capitals as another language)."""


class InstructionFollowingResourcesServer(ResourcesServer):
    Settings = InstructionFollowingSettings
    settings: InstructionFollowingSettings

    def _asks_langdetect(self, ids: Any) -> bool:
        # Any shape: a malformed list is follow_instructions' to refuse (a 400 naming it), not this check's to crash on.
        return self.settings.check_english and isinstance(ids, list) and any(
            isinstance(instruction_id, str) and instruction_id in ENGLISH_KINDS for instruction_id in ids)

    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        text, ids, kwargs = final_message_text(response), row.get("instruction_id_list"), row.get("kwargs")
        check = partial(follow_instructions, text, ids, kwargs, self.settings.check_english)
        try:
            if len(text) <= INLINE_CHARS and not self._asks_langdetect(ids):
                followed = check()
            else:  # long, or asks langdetect (milliseconds a call, its profiles a second on the first): in a thread
                followed = await asyncio.wait_for(asyncio.to_thread(check), VERIFY_TIMEOUT_S)
        except InstructionError as exc:
            raise HandlerError(400, f"the row's instructions: {exc}") from None
        except TimeoutError:
            return failed_verification(FailureClass.JUDGE_ERROR, f"{VERIFY_TIMEOUT}: checking a {len(text)}-character "
                                       f"answer took over {VERIFY_TIMEOUT_S:g} s", verify_timeout=True)
        by_kind: dict[str, float] = {}
        for instruction_id, ok in followed:
            by_kind[f"{FOLLOWED}{instruction_id}"] = min(by_kind.get(f"{FOLLOWED}{instruction_id}", 1.0), float(ok))
        count = sum(ok for _, ok in followed)
        return {"follow_instruction_list": [ok for _, ok in followed], "num_instructions": len(followed),
                "num_followed": count, **by_kind, "reward": 1.0 if count == len(followed) else 0.0}

    def key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        """The mean reward (all followed), instruction-level accuracy and every kind's follow rate."""
        key = super().key_metrics(agent_metrics)
        asked, followed = agent_metrics.get("mean/num_instructions"), agent_metrics.get("mean/num_followed")
        if asked:
            key["instruction_level_accuracy"] = followed / asked
        key.update({name: value for name, value in agent_metrics.items() if name.startswith(f"mean/{FOLLOWED}")})
        return key

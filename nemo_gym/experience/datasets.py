"""Collection-toolkit rows (NeMo Gym JSONL) as DatumSpecs, so one dataset feeds both rollout paths.

The prompt is the row's `responses_create_params.input` (+ `instructions`) rendered with the tokenizer's chat template;
`extra_env_info` is the whole row: native environments read their fields from it (`expected_answer`, a game's
`secret`...), and AsyncNemoGymRolloutImpl sends it to the agents as it is.
"""

from pathlib import Path
from typing import Any, Iterator

from nemo_gym.errors import InputDataError
from nemo_gym.experience.interfaces import DatumSpec
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import message_log_length
from nemo_gym.jsonl_records import iter_records
from nemo_gym.protocol import input_to_messages


def datum_from_row(row: dict[str, Any], template: ChatTemplate, task_name: str, idx: int) -> DatumSpec:
    params = row.get("responses_create_params")
    if not isinstance(params, dict) or "input" not in params:
        raise InputDataError(f"row {idx}: needs responses_create_params.input")
    messages = [m for m in input_to_messages(params["input"], params.get("instructions")) if m.get("content")]
    message_log = template.prompt_message_log(messages)
    return {"message_log": message_log, "extra_env_info": row, "task_name": task_name, "idx": idx,
            "length": message_log_length(message_log), "loss_multiplier": 1.0}


def iter_jsonl_datums(path: str | Path, tokenizer: Any, task_name: str) -> Iterator[DatumSpec]:
    """Each row of a JSONL file as a DatumSpec (idx = its position among the rows); a malformed line names its file
    and line."""
    template = ChatTemplate(tokenizer)
    for idx, (where, row) in enumerate(iter_records(Path(path))):
        try:
            yield datum_from_row(row, template, task_name, idx)
        except InputDataError as exc:
            raise InputDataError(f"{where}: {exc}") from None

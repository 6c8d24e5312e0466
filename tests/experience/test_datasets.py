"""Collection-toolkit rows as DatumSpecs: the prompt is the chat template's rendering, the row rides along."""

import orjson
import pytest
from transformers import AutoTokenizer

from nemo_gym.errors import InputDataError
from nemo_gym.experience.datasets import datum_from_row, iter_jsonl_datums
from nemo_gym.experience.turns.chat_template import ChatTemplate
from nemo_gym.experience.turns.message_log import flat_token_ids
from tests.helpers.model import MODEL_DIR

TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "What is 6 + 6?"}],
                                   "instructions": "Answer with a number."},
       "expected_answer": "12", "agent_ref": {"name": "math_simple_agent"}}


def test_prompt_tokens_are_the_rendered_chat_template_and_the_row_is_kept() -> None:
    datum = datum_from_row(ROW, ChatTemplate(TOKENIZER), "math", 3)
    rendered = TOKENIZER.apply_chat_template(
        [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "What is 6 + 6?"}],
        tokenize=False, add_generation_prompt=True)
    assert flat_token_ids(datum["message_log"]).tolist() == TOKENIZER(rendered, add_special_tokens=False)["input_ids"]
    assert [m["role"] for m in datum["message_log"]] == ["system", "user"]
    assert datum["extra_env_info"] == ROW and datum["task_name"] == "math" and datum["idx"] == 3
    assert datum["length"] == len(flat_token_ids(datum["message_log"]))


def test_jsonl_errors_name_the_file_and_line(tmp_path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(orjson.dumps(ROW) + b"\n" + orjson.dumps({"expected_answer": "1"}) + b"\n")
    with pytest.raises(InputDataError, match=r"rows.jsonl:2: .*responses_create_params"):
        list(iter_jsonl_datums(path, TOKENIZER, "math"))
    path.write_bytes(orjson.dumps(ROW) + b"\n{not json\n")
    datums = iter_jsonl_datums(path, TOKENIZER, "math")
    assert next(datums)["idx"] == 0
    with pytest.raises(InputDataError, match=r"rows.jsonl:2: malformed JSON"):
        next(datums)

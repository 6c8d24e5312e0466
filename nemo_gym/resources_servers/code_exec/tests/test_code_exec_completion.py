"""How the model's message becomes the program that runs: which code is taken, and how it joins the prompt."""

from nemo_gym.protocol import final_message_text
from nemo_gym.resources_servers.code_exec.completion import BODY, FUNCTION, assemble_program, extract_code

PROMPT = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'
TEST = "def check(candidate):\n    assert candidate([1, 2]) == 3\n"


def test_the_fenced_block_that_defines_the_entry_point_wins() -> None:
    text = ("Usage first:\n```python\nprint(total([1]))\n```\nThen:\n```python\ndef total(xs):\n"
            "    return sum(xs)\n```\nDone.")
    assert extract_code(text, "total") == "def total(xs):\n    return sum(xs)\n"


def test_fence_variants() -> None:
    assert extract_code("```py\nx = 1\n```", "f") == "x = 1\n"
    assert extract_code("```\nx = 1\n```", "f") == "x = 1\n"
    assert extract_code("  ```python\nx = 1\n  ```", "f") == "x = 1\n"
    assert extract_code("```python\ndef f():\n    return 1", "f") == "def f():\n    return 1"  # cut off
    assert extract_code("```bash\nls\n```", "f") == "```bash\nls\n```"  # not Python: the whole text


def test_unfenced_text_is_taken_as_it_is() -> None:
    body = "    return sum(xs)\n"
    assert extract_code(body, "total") == body  # indentation kept: it continues the prompt


def test_a_whole_function_follows_the_prompt_and_replaces_the_stub() -> None:
    program, kind = assemble_program(PROMPT, "def total(xs):\n    return sum(xs)\n", TEST, "total")
    assert kind == FUNCTION
    assert program == f"{PROMPT}\ndef total(xs):\n    return sum(xs)\n\n\n{TEST}\n\ncheck(total)\n"
    namespace: dict = {}
    exec(compile(program, "program.py", "exec"), namespace)  # runs: the stub is replaced, the check passes


def test_a_body_continues_the_prompt() -> None:
    program, kind = assemble_program(PROMPT, "    return sum(xs)\n", TEST, "total")
    assert kind == BODY
    assert program.startswith(PROMPT + "    return sum(xs)\n")
    exec(compile(program, "program.py", "exec"), {})


def test_only_a_top_level_definition_of_the_entry_point_counts() -> None:
    assert assemble_program("", "class A:\n    def total(self):\n        pass\n", TEST, "total")[1] == BODY
    assert assemble_program("", "def totally():\n    pass\n", TEST, "total")[1] == BODY
    assert assemble_program("", "async def total():\n    pass\n", TEST, "total")[1] == FUNCTION


def test_the_final_message_is_the_answer() -> None:
    def message(text: str) -> dict:
        return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}

    response = {"output": [message("thinking"), {"type": "function_call", "name": "x"}, message("answer")]}
    assert final_message_text(response) == "answer"
    assert final_message_text({"output": []}) == ""

"""From the model's final message to the program that runs: the code it wrote, joined with the row's prompt and tests.

The code is the fenced block that defines the entry point (```python, ```py or a bare fence; a fence cut off by the
token limit runs to the end), else the first fenced block, else the whole message. It then joins the row's
`prompt` (the function's signature and docstring, plus the imports and helpers the problem gives) in one of two
ways:
- `function`: the code defines `def <entry_point>(` at the top level. The program is the prompt, then the code, so
  the prompt's imports and helper functions stay available and the model's definition replaces the stub.
- `body`: anything else is the continuation of the prompt (a function body, as in the HumanEval reference harness),
  appended to the prompt as it is.
The row's `test` (which defines `check(candidate)`) and `check(<entry_point>)` come last.
"""

import re

FUNCTION = "function"
BODY = "body"

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_PYTHON_TAGS = {"", "python", "py", "python3"}


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", code, re.MULTILINE) is not None


def extract_code(text: str, entry_point: str) -> str:
    """The code of a model's message (see the module docstring for the rule)."""
    blocks = [match.group(2) for match in _FENCE.finditer(text) if match.group(1).lower() in _PYTHON_TAGS]
    if not blocks:
        return text
    return next((block for block in blocks if _defines(block, entry_point)), blocks[0])


def assemble_program(prompt: str, code: str, test: str, entry_point: str) -> tuple[str, str]:
    """(program, kind): the source that runs, and whether the code was a whole `function` or a `body`."""
    if _defines(code, entry_point):
        kind, solution = FUNCTION, f"{prompt}\n{code}"
    else:
        kind, solution = BODY, prompt + code
    return f"{solution}\n\n{test}\n\ncheck({entry_point})\n", kind

"""The chat request for a function-completion problem: the model gets the stub and returns the whole function.

Asking for the complete function in one fenced block (rather than a bare continuation) is what instruct models
answer reliably; completion.py accepts a body as well.
"""

from typing import Any

MAX_OUTPUT_TOKENS = 512  # a HumanEval solution is rarely over 200 tokens; the cap stops a rambling sample early
INSTRUCTION = ("Complete the following Python function. Reply with the complete function, including its signature "
               "and the imports it needs, in a single ```python code block.")


def completion_request(prompt: str) -> dict[str, Any]:
    """`responses_create_params` for a row whose `prompt` is a function's signature and docstring."""
    stub = prompt if prompt.endswith("\n") else prompt + "\n"
    return {
        "input": [{"role": "user", "content": f"{INSTRUCTION}\n\n```python\n{stub}```"}],
        "max_output_tokens": MAX_OUTPUT_TOKENS,
    }

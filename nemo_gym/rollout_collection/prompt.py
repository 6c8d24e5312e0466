"""Prompt configs: a YAML file with `system` and `user` templates that build each row's input from its fields.

    system: You are a careful mathematician.
    user: "Solve: {question}\nPut the final answer in \\boxed{{}}."

Templates use Python format syntax (`{field}`, `{{` for a literal brace), filled from the row's top-level fields.
"""

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nemo_gym.errors import ConfigError, one_line
from nemo_gym.run_format import CREATE_PARAMS

_ROLES = ("system", "user")
OPTION_LABEL = "+prompt_config"


class PromptFillError(ValueError):
    """The prompt config cannot build this row's input; the message says why (the caller adds file and line)."""


@dataclass(frozen=True)
class PromptConfig:
    path: str
    text: str  # the file's content: part of the run fingerprint
    templates: dict[str, str]
    label: str = OPTION_LABEL  # how messages name it: the option, or the dataset entry that set it

    def fill(self, row: dict[str, Any]) -> list[dict[str, str]]:
        """The input messages for `row`; raises KeyError naming a field the row lacks."""
        return [{"role": role, "content": template.format_map(row)} for role, template in self.templates.items()]

    def create_params(self, row: dict[str, Any]) -> dict[str, Any]:
        """`row`'s create params with `input` built from the templates; a row that has its own input is refused."""
        params = row.get(CREATE_PARAMS)
        if params is not None and not isinstance(params, dict):
            raise PromptFillError(f"{CREATE_PARAMS} must be a JSON object, got {type(params).__name__}")
        if params and "input" in params:
            raise PromptFillError(
                f"row already has {CREATE_PARAMS}.input, which {self.label} would replace; drop one of them")
        try:
            return {**(params or {}), "input": self.fill(row)}
        except KeyError as exc:
            raise PromptFillError(f"{self.label} {self.path} uses {{{exc.args[0]}}}, which this row lacks") from None
        except (IndexError, ValueError, AttributeError) as exc:
            raise PromptFillError(f"{self.label} {self.path} cannot be filled: {exc}") from None


def load_prompt_config(path: str, label: str = OPTION_LABEL) -> PromptConfig:
    """Read and check a prompt config; `label` names where it was set, for error messages."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{label}: file not found: {path}")
    text = file.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{label} {path}: invalid YAML: {one_line(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("user"), str):
        raise ConfigError(f"{label} {path}: needs a 'user' template string (and optionally 'system')")
    unknown = sorted(set(data) - set(_ROLES))
    if unknown:
        raise ConfigError(f"{label} {path}: unknown keys {unknown}; expected {list(_ROLES)}")
    templates = {role: data[role] for role in _ROLES if data.get(role) is not None}
    for role, template in templates.items():
        if not isinstance(template, str):
            raise ConfigError(f"{label} {path}: '{role}' must be a string")
        try:
            list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ConfigError(f"{label} {path}: '{role}' template is malformed: {exc}") from None
    return PromptConfig(path=path, text=text, templates=templates, label=label)

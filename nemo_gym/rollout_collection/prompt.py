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

_ROLES = ("system", "user")


@dataclass(frozen=True)
class PromptConfig:
    path: str
    text: str  # the file's content: part of the run fingerprint
    templates: dict[str, str]

    def fill(self, row: dict[str, Any]) -> list[dict[str, str]]:
        """The input messages for `row`; raises KeyError naming a field the row lacks."""
        return [{"role": role, "content": template.format_map(row)} for role, template in self.templates.items()]


def load_prompt_config(path: str) -> PromptConfig:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"+prompt_config: file not found: {path}")
    text = file.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"+prompt_config {path}: invalid YAML: {one_line(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("user"), str):
        raise ConfigError(f"+prompt_config {path}: needs a 'user' template string (and optionally 'system')")
    unknown = sorted(set(data) - set(_ROLES))
    if unknown:
        raise ConfigError(f"+prompt_config {path}: unknown keys {unknown}; expected {list(_ROLES)}")
    templates = {role: data[role] for role in _ROLES if data.get(role) is not None}
    for role, template in templates.items():
        if not isinstance(template, str):
            raise ConfigError(f"+prompt_config {path}: '{role}' must be a string")
        try:
            list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ConfigError(f"+prompt_config {path}: '{role}' template is malformed: {exc}") from None
    return PromptConfig(path=path, text=text, templates=templates)

"""Field listings generated from typed settings: `--help` of every command and the tables of docs/configuration.md."""

from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import BaseModel
from pydantic.fields import PydanticUndefined

from nemo_gym.config.typed import section_model, type_name


@dataclass(frozen=True)
class FieldDoc:
    name: str  # dotted, e.g. head_server.port
    type: str
    default: str  # 'required', or the default as YAML would write it
    meaning: str


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        return "{...}"
    return str(value) if not isinstance(value, (list, dict)) or value else ("[]" if isinstance(value, list) else "{}")


def field_docs(model: type[BaseModel], prefix: str = "") -> list[FieldDoc]:
    """One entry per field of `model`, nested settings flattened into dotted names; required ones first."""
    docs = list(_field_docs(model, prefix))
    return [d for d in docs if d.default == "required"] + [d for d in docs if d.default != "required"]


def _field_docs(model: type[BaseModel], prefix: str) -> Iterator[FieldDoc]:
    for name, info in model.model_fields.items():
        nested = section_model(info.annotation)
        if nested is not None:
            yield from _field_docs(nested, f"{prefix}{name}.")
            continue
        if info.is_required():
            default = "required"
        elif info.default_factory is not None:
            default = _yaml(info.get_default(call_default_factory=True))
        else:
            default = _yaml(info.default if info.default is not PydanticUndefined else None)
        meaning = " ".join((info.description or "").split())
        yield FieldDoc(f"{prefix}{name}", type_name(info.annotation), default, meaning)


def help_lines(model: type[BaseModel], prefix: str = "") -> list[str]:
    """`+name  (type, default)` and its meaning, indented, per field."""
    lines = []
    for doc in field_docs(model, prefix):
        default = "required" if doc.default == "required" else f"default {doc.default}"
        lines.append(f"  +{doc.name}  ({doc.type}; {default})")
        if doc.meaning:
            lines.append(f"      {doc.meaning}")
    return lines


def markdown_table(model: type[BaseModel], prefix: str = "") -> str:
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for doc in field_docs(model, prefix):
        cells = [f"`{doc.name}`", doc.type, f"`{doc.default}`" if doc.default != "required" else "required",
                 doc.meaning]
        cells[-1] = cells[-1].replace("<", "&lt;")  # <stem> is text, not an HTML tag
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)

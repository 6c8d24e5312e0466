"""Typed settings: one pydantic model per command and per server implementation, checked when the config loads.

A bad value fails before anything runs, as a `ConfigError` naming the field, what it should be, what it got and,
when known, the file and line that set it. Each field's docstring is its one-line meaning: `--help` and
docs/configuration.md show it.
"""

import difflib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Iterable, Literal, Mapping, TypeVar, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from nemo_gym.errors import ConfigError


def _number_as_text(value: Any) -> Any:
    # Hydra reads `+agent_name=123` or `+slurm.time=60` as numbers; they are still valid names.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def _as_path(value: Any) -> Any:
    value = _number_as_text(value)
    return Path(value) if isinstance(value, str) else value


Text = Annotated[str, BeforeValidator(_number_as_text)]
"""A string; a number given for it (Hydra parses `+name=2024` as one) is taken as its text."""
FilePath = Annotated[Path, BeforeValidator(_as_path)]

S = TypeVar("S", bound=BaseModel)
R = TypeVar("R")


def lenient(hint: Any) -> Any:
    """`hint` with `str` read as Text and `Path` as FilePath (a number given for either is taken as its text)."""
    if hint is str:
        return Text
    if hint is Path:
        return FilePath
    if typing.get_origin(hint) in (Union, types.UnionType):
        return Union[tuple(lenient(arg) for arg in typing.get_args(hint))]
    return hint
UnknownKeys = Literal["error", "near_miss", "ignore"]


class Settings(BaseModel):
    """Base of every typed settings class: strict types (no 'yes' for true, no '10' for 10), immutable."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore", use_attribute_docstrings=True)
    type_label: ClassVar[str | None] = None  # set: shown as one value of this type, not as its fields


def _plus(field: str) -> str:
    return f"+{field}"


def nowhere(field: str) -> str | None:
    """A `where` for values whose source is unknown."""
    return None


def section_model(hint: Any) -> type[BaseModel] | None:
    """The settings class of a field that holds its own keys (head_server.port), or None for one that reads as a
    single value (a server reference, which has a type_label)."""
    is_section = isinstance(hint, type) and issubclass(hint, BaseModel) and not getattr(hint, "type_label", None)
    return hint if is_section else None


def type_name(hint: Any) -> str:
    """What a value of type `hint` is, in words a config author reads ('an integer or null')."""
    if typing.get_origin(hint) is Annotated:
        return type_name(typing.get_args(hint)[0])
    if typing.get_origin(hint) is Literal:
        return " or ".join(repr(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = typing.get_args(hint)
        named = " or ".join(type_name(a) for a in args if a is not type(None))
        return f"{named} or null" if type(None) in args else named
    origin = typing.get_origin(hint) or hint
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return "a list" if item is Any else f"a list of {_plural(type_name(item))}"
    if isinstance(origin, type) and issubclass(origin, BaseModel):
        return getattr(origin, "type_label", None) or "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping",
            Path: "a path", Any: "any value"}.get(origin, str(hint))


def _plural(name: str) -> str:
    return {"a string": "strings", "an integer": "integers", "a number": "numbers", "a mapping": "mappings"}.get(
        name, name)


def _constraint_text(error: Any) -> str | None:
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "greater_than":
        return "must be positive" if ctx["gt"] == 0 else f"must be greater than {ctx['gt']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return None


def format_errors(model: type[BaseModel], exc: ValidationError, values: Mapping[str, Any],
                  name: Callable[[str], str], where: Callable[[str], str | None], label: str = "") -> str:
    """One line per field (joined by '; '): `<name> must be <type>, got <value> (<file:line>)`.

    `label` starts the message of a check across fields (which names its fields itself)."""
    messages: dict[str, str] = {}
    for error in exc.errors():
        if not error["loc"]:
            messages.setdefault("", label + str((error.get("ctx") or {}).get("error", error["msg"])))
            continue
        field = str(error["loc"][0])
        located = f" ({where(field)})" if where(field) else ""
        if error["type"] == "missing":
            shown = name(field)
            messages[field] = f"missing required {'option ' + shown + '=...' if shown.startswith('+') else shown}"
            continue
        constraint = _constraint_text(error)
        if constraint is not None:
            separator = "" if constraint.startswith(".") else " "
            got = "" if error["type"] == "value_error" else f", got {error['input']!r}"
            messages[field] = f"{name(field)}{separator}{constraint}{got}{located}"
        elif field not in messages:
            hint = model.model_fields[field].annotation if field in model.model_fields else Any
            messages[field] = f"{name(field)} must be {type_name(hint)}, got {values.get(field)!r}{located}"
    return "; ".join(messages.values())


def check_unknown_keys(model: type[BaseModel], keys: Iterable[str], mode: UnknownKeys, name: Callable[[str], str],
                       where: Callable[[str], str | None], also_known: Iterable[str] = ()) -> None:
    """Refuse unknown keys ('error'), or only those a typo away from a field ('near_miss'), which would otherwise be
    ignored silently and make the run wrong."""
    if mode == "ignore":
        return
    fields = list(model.model_fields)
    known = set(fields) | set(also_known)
    for key in keys:
        if key in known:
            continue
        located = f" ({where(key)})" if where(key) else ""
        close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6 if mode == "error" else 0.85)
        if close:
            raise ConfigError(f"unknown option {name(key)}{located}; did you mean {name(close[0])}?")
        if mode == "error":
            raise ConfigError(f"unknown option {name(key)}{located} (known: {', '.join(name(f) for f in fields)})")


def _in_section(key: str, describe: Callable[[str], R]) -> Callable[[str], R]:
    """`describe` (a `name` or `where`) for the fields of section `key`, by their dotted key."""
    return lambda field: describe(f"{key}.{field}")


def build(model: type[S], values: Mapping[str, Any], *, name: Callable[[str], str] = _plus,
          where: Callable[[str], str | None] = nowhere, unknown: UnknownKeys = "ignore",
          also_known: Iterable[str] = (), label: str = "", **extra: Any) -> S:
    """`model` from `values` (only its own fields are read) plus `extra`, or a ConfigError naming every bad field.

    A section (a field holding settings of its own) is built first, so its errors name the dotted key
    (+head_server.port), not the whole section."""
    check_unknown_keys(model, [str(k) for k in values], unknown, name, where, also_known)
    data = {key: value for key, value in values.items() if key in model.model_fields}
    for key, value in data.items():
        section = section_model(model.model_fields[key].annotation)
        if section is not None and isinstance(value, Mapping):
            data[key] = build(section, value, name=_in_section(key, name), where=_in_section(key, where),
                              unknown=unknown)
    data.update(extra)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_errors(model, exc, data, name, where, label)) from None

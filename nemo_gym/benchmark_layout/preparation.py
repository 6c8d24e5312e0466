"""ng_prepare_benchmark's work: import a benchmark's prepare.py, check the options against its signature, call
`prepare(output_dir, **options)`, and validate every row of the file it returns.

Options are checked before anything is written: a name prepare() does not take, or a value of the wrong type for
its annotation (`seed: int`), is a one-line error listing what it accepts.
"""

import inspect
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson
from pydantic import ConfigDict, PydanticSchemaGenerationError, TypeAdapter, ValidationError

from nemo_gym.benchmark_layout.discover import Benchmark, shown
from nemo_gym.config.typed import lenient, type_name
from nemo_gym.errors import ConfigError, InputDataError
from nemo_gym.run_files.rows import iter_lines

PrepareFunction = Callable[..., Any]
_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True)
class PreparedFile:
    path: Path
    rows: int


def load_prepare(benchmark: Benchmark) -> PrepareFunction:
    """The `prepare` function of the benchmark's prepare.py, loaded as a module of its own name.

    Compiled from the source each time: no bytecode cache in the benchmark folder, and an edit is never hidden by
    a stale one."""
    path = benchmark.prepare_path
    try:
        code = compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:
        raise ConfigError(f"{shown(path)}:{exc.lineno}: invalid Python: {exc.msg}") from None
    module = types.ModuleType(f"nemo_gym_benchmark_{benchmark.name}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # what dataclasses and pickling look a module up by
    exec(code, module.__dict__)
    prepare = getattr(module, "prepare", None)
    if not callable(prepare):
        raise ConfigError(f"{shown(path)} defines no function prepare(output_dir, **options)")
    return prepare


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """`value` for a parameter annotated `hint`, checked as a typed setting (nemo_gym.config.typed); an
    unannotated parameter, or one of a type pydantic cannot check, is left for prepare() to validate."""
    if hint is Any:
        return value
    try:
        adapter = TypeAdapter(lenient(hint), config=ConfigDict(strict=True))
    except PydanticSchemaGenerationError:
        return value
    try:
        return adapter.validate_python(value)
    except ValidationError:
        raise ConfigError(f"+{name} must be {type_name(hint)}, got {value!r}") from None


def check_options(benchmark: Benchmark, prepare: PrepareFunction, options: dict[str, Any]) -> dict[str, Any]:
    """The options as prepare() takes them; unknown names, wrongly typed values and missing ones are refused."""
    parameters = list(inspect.signature(prepare).parameters.values())[1:]  # the first one is output_dir
    named = {p.name: p for p in parameters if p.kind in _KEYWORD_KINDS}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    hints = typing.get_type_hints(prepare)
    checked = {}
    for name, value in options.items():
        if name not in named and not takes_any:
            accepted = ", ".join(f"+{n}" for n in named) or "no options"
            raise ConfigError(f"unknown option +{name} for benchmark '{benchmark.name}' "
                              f"({shown(benchmark.prepare_path)} takes {accepted})")
        checked[name] = _coerce(name, value, hints.get(name, Any))
    for name, parameter in named.items():
        if parameter.default is inspect.Parameter.empty and name not in checked:
            raise ConfigError(f"benchmark '{benchmark.name}' needs +{name}=... ({shown(benchmark.prepare_path)})")
    return checked


def _check_row(path: Path, line_no: int, line: bytes) -> None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InputDataError(f"{shown(path)}:{line_no}: malformed JSON ({exc})") from None
    params = row.get("responses_create_params") if isinstance(row, dict) else None
    given = params.get("input") if isinstance(params, dict) else None
    messages = isinstance(given, list) and given and all(isinstance(item, dict) for item in given)
    if not messages and not (isinstance(given, str) and given):
        raise InputDataError(f"{shown(path)}:{line_no}: responses_create_params.input must be a non-empty string "
                             f"or list of messages, got {given!r}")


def count_valid_rows(path: Path) -> int:
    """Rows of a prepared file, each checked to be a JSON object with `responses_create_params.input`."""
    if not path.is_file():
        raise InputDataError(f"{shown(path)}: not a file")
    rows = 0
    for line_no, _, line in iter_lines(path):
        _check_row(path, line_no, line)
        rows += 1
    if not rows:
        raise InputDataError(f"{shown(path)}: no rows")
    return rows


def prepare_benchmark(benchmark: Benchmark, output_dir: Path | None, options: dict[str, Any]) -> PreparedFile:
    prepare = load_prepare(benchmark)
    kwargs = check_options(benchmark, prepare, options)
    output_dir = output_dir or benchmark.default_output_dir
    created = not output_dir.exists()
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        written = prepare(output_dir, **kwargs)
    except BaseException:
        if created and not any(output_dir.iterdir()):
            output_dir.rmdir()  # a failed preparation leaves nothing behind
        raise
    if not isinstance(written, (str, Path)):
        raise ConfigError(f"{shown(benchmark.prepare_path)}: prepare() must return the path of the file it wrote, "
                          f"got {written!r}")
    return PreparedFile(Path(written), count_valid_rows(Path(written)))

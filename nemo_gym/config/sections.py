"""Nothing in a config is dropped silently: every top-level mapping is a server, a known setting, or referenced.

A section that is none of these (a benchmark's server with a misspelled kind, a leftover directive, a section that
never became a server) is an error naming it and the file and line that define it, instead of a server that
quietly never starts.
"""

import difflib
import re
from typing import Any, Callable, Iterator

from nemo_gym.config.servers import SERVER_KINDS, as_server
from nemo_gym.errors import ConfigError

# Top-level settings whose value is a mapping: the commands' own (head_server, responses_create_params, num_repeats,
# traces) and NeMo Gym's run-level ones that its configs may carry (skills).
MAPPING_SETTINGS = frozenset({"head_server", "responses_create_params", "num_repeats", "traces", "skills"})

_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_][\w\-]*)")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def referenced_sections(config: dict[str, Any]) -> set[str]:
    """Top-level names used by an interpolation such as `${judge_defaults.model}` anywhere in `config`."""
    return {match.group(1) for text in _strings(config) for match in _REFERENCE.finditer(text)}


def check_sections(config: dict[str, Any], referenced: set[str], source_of: Callable[[str], str]) -> None:
    """Raise ConfigError for the first top-level mapping that is neither a server nor a known or referenced setting.

    `config` is the merged config (directives applied); `referenced` comes from `referenced_sections` on it before
    values were resolved."""
    for name, value in config.items():
        name = str(name)
        if not isinstance(value, dict) or not value or name in MAPPING_SETTINGS or name in referenced:
            continue
        if as_server(name, value) is not None:
            continue
        where = source_of(name)
        kinds = [key for key in value if key in SERVER_KINDS]
        if kinds:
            others = ", ".join(sorted(str(key) for key in value if key not in SERVER_KINDS))
            raise ConfigError(f"section '{name}' ({where}) holds '{kinds[0]}' and also {others}: a server section "
                              f"holds only its kind, as {name}: {{{kinds[0]}: {{<implementation>: {{...}}}}}}")
        for key in value:
            close = difflib.get_close_matches(str(key), SERVER_KINDS, n=1, cutoff=0.8)
            if close:
                raise ConfigError(f"section '{name}' ({where}): unknown server kind '{key}'; did you mean "
                                  f"'{close[0]}'?")
        raise ConfigError(
            f"section '{name}' ({where}) is neither a server ({name}: {{<kind>: {{<implementation>: {{...}}}}}} "
            f"with kind one of {', '.join(SERVER_KINDS)}) nor a known setting; fix or remove it")

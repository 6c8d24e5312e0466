"""NeMo Gym's config directives, applied to the merged config before values are resolved.

    my_server:                        # a copy of `generic_server` with local changes merged over it;
      _inherit_from: generic_server   # `generic_server` itself is removed from the config (it moved here)
      resources_servers: {...}
    other: {_copy: generic_server}    # the same, but the source stays
    x: ${inherit_from:a.b}            # string forms of both, for any value
    y: ${copy:a.b}
    z: {_inherit_from: a, _delete_key: "k1, k2"}   # ... then drop keys k1, k2 from the result

Paths are dotted from the top of the merged config. Every source is read as it was before any directive ran,
so two sections may inherit from one source; a source that itself inherits is resolved first (NeMo Gym 0.4.0
leaves such a chain half-applied). A source left as `???` makes the target `???`, reported as a missing value.
"""

import copy
from typing import Any, Callable

from omegaconf import OmegaConf

from nemo_gym.errors import ConfigError

INHERIT_KEY = "_inherit_from"
COPY_KEY = "_copy"
DELETE_KEY = "_delete_key"
_INHERIT_PREFIX = "${inherit_from:"
_COPY_PREFIX = "${copy:"
MISSING = "???"


class _Unset:
    """A source path that runs through a `???` value."""


_UNSET = _Unset()


def _directive(value: Any) -> tuple[bool, str, dict[str, Any] | None] | None:
    """(moves the source, source path, local values merged over it) if `value` is a directive, else None."""
    if isinstance(value, str):
        for prefix, moves in ((_INHERIT_PREFIX, True), (_COPY_PREFIX, False)):
            if value.startswith(prefix) and value.endswith("}"):
                return moves, value[len(prefix):-1].strip(), None
    elif isinstance(value, dict):
        for key, moves in ((INHERIT_KEY, True), (COPY_KEY, False)):
            if key in value:
                return moves, str(value.pop(key)), value
    return None


def _lookup(tree: Any, parts: list[str], source: str, here: str, where: Callable[[str], str]) -> Any:
    node = tree
    for part in parts:
        if node == MISSING:
            return _UNSET
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"'{here}' ({where(here)}) inherits from '{source}', which is not in the merged config")
        node = node[part]
    return _UNSET if node == MISSING else node


class _Applier:
    def __init__(self, root: dict[str, Any], where: Callable[[str], str]) -> None:
        self.root = root
        self.frozen = copy.deepcopy(root)
        self.where = where
        self.aliases: dict[str, list[str]] = {}
        self.active: list[str] = []

    def walk(self, node: dict[str, Any], path: str) -> None:
        for key, value in list(node.items()):
            here = f"{path}.{key}" if path else str(key)
            resolved = self.resolve(value, here)
            if resolved is not value:
                node[key] = resolved

    def resolve(self, value: Any, here: str) -> Any:
        """`value` with the directives inside it applied; a new object where `value` itself is a directive."""
        delete_later: set[str] = set()
        if isinstance(value, dict) and DELETE_KEY in value:
            names = {name.strip() for name in str(value.pop(DELETE_KEY)).split(",") if name.strip()}
            delete_later = {name for name in names if value.pop(name, _UNSET) is _UNSET}
        if isinstance(value, dict):
            self.walk(value, here)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    self.walk(item, f"{here}[{i}]")
        directive = _directive(value)
        if directive is None:
            return value
        moves, source, local = directive
        if source in self.active:
            raise ConfigError(f"'{here}' ({self.where(here)}): inheritance cycle {' -> '.join([*self.active, source])}")
        parts = source.split(".")
        parent = _lookup(self.root, parts[:-1], source, here, self.where)
        if moves and isinstance(parent, dict):
            parent.pop(parts[-1], None)  # several sections may move one source: only the first finds it
        inherited = _lookup(self.frozen, parts, source, here, self.where)
        if parent is _UNSET or inherited is _UNSET:
            return MISSING
        self.active.append(source)
        inherited = self.resolve(copy.deepcopy(inherited), here)  # a source that inherits itself
        self.active.pop()
        if local:
            inherited = OmegaConf.to_container(OmegaConf.merge(inherited, local), resolve=False)
        for name in delete_later:
            if not isinstance(inherited, dict) or name not in inherited:
                raise ConfigError(f"'{here}' ({self.where(here)}): _delete_key names '{name}', which '{source}' "
                                  f"does not have")
            inherited.pop(name)
        self.aliases.setdefault(here, []).insert(0, source)
        return inherited


def apply_directives(root: dict[str, Any], where: Callable[[str], str]) -> dict[str, list[str]]:
    """Apply every directive in `root` (a plain, unresolved container) in place.

    Returns {target dotted path: its source dotted paths, nearest first}, so a key that came from a source can be traced to the file
    and line that set it. `where(dotted_key)` names where a key was set, for errors.
    """
    applier = _Applier(root, where)
    applier.walk(root, "")
    return applier.aliases

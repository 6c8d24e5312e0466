"""Load the global config: `+config_paths=[...]` YAML files in order, then `env.yaml`, then command-line overrides.

As in NeMo Gym 0.4.0: a YAML file's own `config_paths` are appended to the list (each file once) and merged after
the files before them; a relative path is looked up in the current directory, then in the checkout that holds
this package; `_inherit_from`/`_copy`/`_delete_key` directives are applied to the merged config (see inherit.py).
Every top-level section must be a server or a known setting (sections.py).

Every value is resolved (interpolations such as `${policy_base_url}`) and every mandatory `???` is checked before
anything starts; an error names the key and the file and line it came from.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, cast

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, MissingMandatoryValue, OmegaConfBaseException

from nemo_gym.config.inherit import apply_directives
from nemo_gym.config.sections import check_sections, referenced_sections
from nemo_gym.config.servers import ServerSpec, parse_server_tree
from nemo_gym.config.shortcuts import apply_model_shortcuts
from nemo_gym.errors import ConfigError, one_line

ENV_YAML = "env.yaml"
COMMAND_LINE = "the command line"
CONFIG_PATHS = "config_paths"
# Where NeMo Gym looks for a relative config path after the current directory: its install root (the checkout).
INSTALL_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ConfigSource:
    """One layer of the merge: a YAML file, env.yaml, or the command line."""

    name: str
    cfg: DictConfig
    path: Path | None = None


@dataclass
class GlobalConfig:
    """The merged, resolved config plus where each part came from."""

    values: dict[str, Any]
    sources: list["ConfigSource"] = field(default_factory=list)
    aliases: dict[str, list[str]] = field(default_factory=dict)  # inherited section -> its sources

    def get(self, dotted_key: str, default: Any = None) -> Any:
        node: Any = self.values
        for part in dotted_key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def source_of(self, dotted_key: str) -> str:
        """Where `dotted_key` was last set: 'file.yaml:LINE', 'env.yaml', or 'the command line'."""
        return _source_of(self.sources, dotted_key, self.aliases)

    def servers(self) -> dict[str, ServerSpec]:
        return parse_server_tree(self.values, self.source_of)


def _yaml_line(path: Path, dotted_key: str) -> int | None:
    """1-based line of `dotted_key` in a YAML file, found through the YAML node tree (no re-parsing tricks)."""
    try:
        node = yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    for part in dotted_key.split("."):
        if not isinstance(node, yaml.MappingNode):
            return None
        for key_node, value_node in node.value:
            if key_node.value == part:
                node = value_node
                line = key_node.start_mark.line + 1
                break
        else:
            return None
    return line


def plain_dict(cfg: DictConfig, *, resolve: bool = False, throw_on_missing: bool = False) -> dict[str, Any]:
    """`cfg` as plain Python values. A DictConfig always converts to a dict (omegaconf's signature says any
    container)."""
    return cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=resolve, throw_on_missing=throw_on_missing))


def _has_key(cfg: DictConfig, dotted_key: str) -> bool:
    node: Any = OmegaConf.to_container(cfg, resolve=False)
    for part in dotted_key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _source_of(sources: Sequence[ConfigSource], dotted_key: str, aliases: dict[str, list[str]] | None = None) -> str:
    for source in reversed(sources):
        if _has_key(source.cfg, dotted_key):
            line = _yaml_line(source.path, dotted_key) if source.path else None
            return f"{source.name}:{line}" if line else source.name
    # A key a section inherited was set under the section it came from.
    for target, origins in (aliases or {}).items():
        if dotted_key.startswith(f"{target}."):
            for origin in origins:
                found = _source_of(sources, origin + dotted_key[len(target):])
                if found != NO_SOURCE:
                    return found
    return NO_SOURCE


NO_SOURCE = "no config file"


def parse_overrides(argv: Sequence[str]) -> list[tuple[str, Any]]:
    """Parse Hydra override strings (`+key=value`, `key=value`, `++key=value`) into (key, value) pairs.

    We accept all three forms as "set": users of NeMo Gym write `+key=value` for keys that may already exist.
    """
    try:
        parsed = OverridesParser.create().parse_overrides(list(argv))
    except HydraException as exc:
        raise ConfigError(f"cannot parse command-line override: {one_line(exc)}") from None
    pairs = []
    for override in parsed:
        if override.is_delete():
            raise ConfigError(f"deleting keys ('~{override.key_or_group}') is not supported")
        # We run one job, never a Hydra sweep: `a,b` means the literal text (e.g. a comma-separated glob list).
        value = override.get_value_string() if override.is_sweep_override() else override.value()
        pairs.append((override.key_or_group, value))
    return pairs


def _load_yaml(name: str, file: Path) -> ConfigSource:
    try:
        cfg = OmegaConf.load(file)
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        raise ConfigError(f"{name}: invalid YAML: {one_line(exc)}") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{name}: top level must be a mapping")
    return ConfigSource(name, cfg, file)


def _as_path_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [p.strip() for p in value.strip("[]").split(",") if p.strip()]
    if isinstance(value, (list, ListConfig)):
        return [str(p) for p in value]
    raise ConfigError(f"{CONFIG_PATHS} ({where}) must be a list of YAML paths, got {value!r}")


def _config_file(entry: str, cwd: Path, listed_in: str) -> ConfigSource:
    """Load one `config_paths` entry: an absolute path, or relative to `cwd`, else to the install root."""
    path = Path(entry)
    candidates = [path] if path.is_absolute() else list(dict.fromkeys([cwd / path, INSTALL_ROOT / path]))
    for candidate in candidates:
        if candidate.is_file():
            return _load_yaml(entry, candidate)
    looked = " and ".join(str(c) for c in candidates)
    raise ConfigError(f"config file not found: {entry} (listed in {CONFIG_PATHS} of {listed_in}; looked at {looked})")


def _config_files(entries: list[str], listed_in: str, cwd: Path) -> tuple[list[str], list[ConfigSource]]:
    """Every file of `entries` and, after them, those the files list in their own `config_paths`, each once."""
    paths, origins, sources = list(entries), {entry: listed_in for entry in entries}, []
    for entry in paths:  # grows while it is walked: nested files are merged after the files that list them
        source = _config_file(entry, cwd, origins[entry])
        for nested in _as_path_list(source.cfg.get(CONFIG_PATHS), entry):
            if nested not in origins:
                paths.append(nested)
                origins[nested] = entry
        sources.append(source)
    return paths, sources


def load_global_config(argv: Sequence[str] = (), cwd: Path | None = None, require_complete: bool = True) -> GlobalConfig:
    """Merge config files, `env.yaml` and command-line overrides, then resolve and validate.

    `require_complete=False` keeps `???` values unresolved (for commands that only read part of the config).
    """
    cwd = cwd or Path.cwd()
    overrides = parse_overrides(argv)
    cli = OmegaConf.create({})
    for key, value in overrides:
        OmegaConf.update(cli, key, value, merge=True, force_add=True)

    env_file = cwd / ENV_YAML
    env = _load_yaml(ENV_YAML, env_file) if env_file.is_file() else ConfigSource(ENV_YAML, OmegaConf.create({}))

    listed_in = COMMAND_LINE if CONFIG_PATHS in cli else ENV_YAML
    entries = _as_path_list(cli.get(CONFIG_PATHS, None) or env.cfg.get(CONFIG_PATHS, None), listed_in)
    config_paths, sources = _config_files(entries, listed_in, cwd)
    sources += [env, ConfigSource(COMMAND_LINE, cli)]

    merged = OmegaConf.merge(*(source.cfg for source in sources))
    assert isinstance(merged, DictConfig), "merging mappings gives a mapping"
    raw = plain_dict(merged)
    if config_paths:
        raw[CONFIG_PATHS] = config_paths
    aliases = apply_directives(raw, lambda key: _source_of(sources, key))
    apply_model_shortcuts(raw)
    # A section is in use when an interpolation names it or a directive read from it.
    referenced = referenced_sections(raw) | {path.split(".")[0] for paths in aliases.values() for path in paths}
    values = _resolve(OmegaConf.create(raw), sources, aliases, require_complete)
    config = GlobalConfig(values=values, sources=sources, aliases=aliases)
    check_sections(values, referenced, config.source_of)
    if require_complete:
        config.servers()  # validates the server tree and its references
    return config


def _resolve(merged: DictConfig, sources: list[ConfigSource], aliases: dict[str, list[str]],
             require_complete: bool) -> dict[str, Any]:
    try:
        return plain_dict(merged, resolve=require_complete, throw_on_missing=require_complete)
    except MissingMandatoryValue as exc:
        key = exc.full_key or "?"  # always set for these errors
        raise ConfigError(
            f"missing mandatory value '{key}' ({_source_of(sources, key, aliases)} leaves it as ???); "
            f"set it in env.yaml or pass +{key}=..."
        ) from None
    except InterpolationKeyError as exc:
        key = exc.full_key or "?"  # always set for these errors
        wanted = str(exc).splitlines()[0].split("'")[1] if "'" in str(exc) else "?"
        raise ConfigError(
            f"'{key}' ({_source_of(sources, key, aliases)}) uses ${{{wanted}}}, which is not set; "
            f"put {wanted}: ... in env.yaml or pass +{wanted}=..."
        ) from None
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or "?"
        raise ConfigError(f"cannot resolve '{key}' ({_source_of(sources, key, aliases)}): "
                          f"{str(exc).splitlines()[0]}") from None

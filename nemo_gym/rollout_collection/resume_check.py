"""Whether a run may write to its output: a fresh run needs an empty one, a resume needs the same run's manifest."""

from pathlib import Path
from typing import Protocol

from nemo_gym.errors import NemoGymError
from nemo_gym.rollout_collection.manifest import changed_fields, recorded_fingerprint


class RunOutput(Protocol):
    """What the checks read of a run's config (a collection's, a re-verification's): its files."""

    @property
    def output_path(self) -> Path: ...

    @property
    def failures_jsonl_fpath(self) -> Path: ...

    @property
    def manifest_fpath(self) -> Path: ...


def file_size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def check_fresh(config: RunOutput) -> None:
    """Refuse to start a fresh run over the results of an earlier one."""
    for path in (config.output_path, config.failures_jsonl_fpath):
        if file_size(path):
            raise NemoGymError(
                f"{path} already holds results of an earlier run; pass +resume_from_cache=true to continue that "
                f"run, or delete it (and {config.failures_jsonl_fpath.name}, {config.manifest_fpath.name}) to start over"
            )


def config_changes(config: RunOutput, fp: dict) -> list[str] | None:
    """How this run (fingerprint `fp`) differs from the one that wrote the output; None when there is nothing to
    resume."""
    if not file_size(config.output_path) and not file_size(config.failures_jsonl_fpath):
        return None
    recorded = recorded_fingerprint(config.manifest_fpath)
    if recorded is None:
        return [f"no manifest ({config.manifest_fpath.name}) to compare with"]
    return changed_fields(recorded, fp)


def resume_refusal(output: Path, changes: list[str]) -> NemoGymError:
    """The error of a resume whose run changed (`changes`, from config_changes) since it wrote `output`."""
    return NemoGymError(
        f"refusing to resume {output}: this run differs from the one that wrote it ({'; '.join(changes)}). "
        "Use a new +output_jsonl_fpath, or pass +resume_ignore_config_change=true to mix them anyway"
    )

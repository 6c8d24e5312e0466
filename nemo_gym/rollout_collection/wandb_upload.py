"""Weights & Biases upload for ng_collect_rollouts (+upload_rollouts_to_wandb=true).

Rollouts are logged while the run goes, as one table per chunk of rows, so a long run shows up in W&B at once and
never builds one giant table in memory at the end. The run config goes up with secrets redacted; at the end the
aggregate metrics are logged under NeMo Gym's names (also as the run summary) and the metrics file plus the HTML
report become an artifact.
A missing login is found before the first rollout, not after hours of collection.
"""

import importlib.util
import netrc
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson

from nemo_gym.config.redact import redact_secrets
from nemo_gym.errors import ConfigError
from nemo_gym.rollout_collection.config import SharedRolloutCollectionConfig

CHUNK_ROWS = 500
_LOCAL_MODES = ("offline", "disabled", "dryrun")


def require_wandb_login() -> None:
    if importlib.util.find_spec("wandb") is None:
        raise ConfigError("+upload_rollouts_to_wandb=true needs wandb, an optional part: pip install 'nemo_gym[wandb]'")
    if not _logged_in():
        raise ConfigError(
            "+upload_rollouts_to_wandb=true but wandb is not logged in: run `wandb login`, set WANDB_API_KEY, "
            "or set WANDB_MODE=offline to write the run locally (upload it later with `wandb sync`)"
        )


def _logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE", "").lower() in _LOCAL_MODES:
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def _cell(value: Any) -> Any:
    """Nested values become JSON text: a W&B table cell holds scalars."""
    return orjson.dumps(value).decode() if isinstance(value, (dict, list)) else value


def wandb_metrics(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """NeMo Gym's W&B names: `<agent>/<metric>` for every agent metric, `key_metrics/<agent>/<metric>` for the
    headline ones; scalar values only."""
    metrics: dict[str, Any] = {}
    for entry in summaries:
        agent = entry["agent_ref"]["name"]
        for section, prefix in (("agent_metrics", f"{agent}/"), ("key_metrics", f"key_metrics/{agent}/")):
            metrics.update({prefix + key: value for key, value in (entry.get(section) or {}).items()
                            if value is None or isinstance(value, (bool, int, float, str))})
    return metrics


class WandbUploader:
    """One W&B run for one collection run; `on_row` is the runner's per-rollout callback."""

    def __init__(self, project: str, name: str | None, entity: str | None, run_config: dict[str, Any],
                 chunk_rows: int = CHUNK_ROWS) -> None:
        require_wandb_login()
        import wandb  # only runs that upload pay for importing wandb

        self._wandb = wandb
        self.run = wandb.init(project=project, name=name, entity=entity, config=redact_secrets(run_config),
                              job_type="rollout_collection")
        self.chunk_rows = chunk_rows
        self._rows: list[dict[str, Any]] = []
        self.logged = 0

    def on_row(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.chunk_rows:
            self.flush()

    def flush(self) -> None:
        """Log the buffered rows as one table chunk."""
        if not self._rows:
            return
        columns = list(dict.fromkeys(key for row in self._rows for key in row))
        # wandb annotates columns as list[str | int], which a list[str] is not (lists are invariant).
        table = self._wandb.Table(columns=columns,  # type: ignore[arg-type]
                                  data=[[_cell(row.get(c)) for c in columns] for row in self._rows])
        self.logged += len(self._rows)
        self.run.log({"rollouts": table, "rollouts_logged": self.logged})
        self._rows = []

    def finish(self, summaries: list[dict[str, Any]], files: list[Path]) -> None:
        """Flush the last rows, put every agent's metrics in the summary, the files in an artifact, and close."""
        self.flush()
        metrics = wandb_metrics(summaries)
        self.run.log(metrics)
        self.run.summary.update(metrics)
        existing = [path for path in files if path.is_file()]
        if existing:
            artifact = self._wandb.Artifact(f"rollout-report-{self.run.id}", type="rollout_report")
            for path in existing:
                artifact.add_file(str(path))
            self.run.log_artifact(artifact)
        self.run.finish()

    def abort(self) -> None:
        """Close the run after a failed collection, keeping what was logged."""
        self.flush()
        self.run.finish(exit_code=1)


def start_wandb_upload(config: SharedRolloutCollectionConfig) -> WandbUploader:
    """The uploader for a collection config (`wandb_project`, `wandb_name`, `wandb_entity`; the rest is logged)."""
    assert config.wandb_project, "the config requires it with +upload_rollouts_to_wandb=true"
    return WandbUploader(config.wandb_project, config.wandb_name, config.wandb_entity, config.model_dump(mode="json"),
                         config.wandb_chunk_rows)

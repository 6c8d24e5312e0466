"""The Python API of the collection toolkit, with NeMo Gym's names: what the ng_* commands run, callable from code.

    helper = RolloutCollectionHelper("http://127.0.0.1:11000")
    async for row, result in helper.run_examples(rows, num_samples_in_parallel=64):
        ...                                                   # results as they finish
    summary = await helper.run_from_config(RolloutCollectionConfig(...))    # = ng_collect_rollouts
    metrics_path = await RolloutAggregationHelper().run_from_config(RolloutAggregationConfig(...))
"""

import asyncio
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from nemo_gym import console
from nemo_gym.config.global_settings import head_server
from nemo_gym.errors import DownstreamError, NemoGymError
from nemo_gym.http_client import HttpClient
from nemo_gym.rollout_collection.aggregate import aggregate_rollouts, headline_lines
from nemo_gym.rollout_collection.collect import CollectionSummary, collect_rollouts
from nemo_gym.rollout_collection.config import (
    RolloutAggregationConfig,
    RolloutCollectionConfig,
    SharedRolloutCollectionConfig,
)
from nemo_gym.rollout_collection.engine import RolloutEngine
from nemo_gym.rollout_collection.rollout import RolloutPolicy
from nemo_gym.rollout_collection.stream import RolloutStream
from nemo_gym.run_files.paths import rollout_files
from nemo_gym.server.client import ServerClient

_DEFAULTS = SharedRolloutCollectionConfig.model_fields


def head_server_url(head_server_config: Any) -> str:
    """The head server's URL from a URL string, a mapping with host/port, an object with .host/.port (NeMo
    Gym's BaseServerConfig), or None (ng_run's default, http://127.0.0.1:11000)."""
    if head_server_config is None:
        return head_server({}).url
    if isinstance(head_server_config, str):
        url = head_server_config if "://" in head_server_config else f"http://{head_server_config}"
        return url.rstrip("/")
    if isinstance(head_server_config, Mapping):
        return head_server({"head_server": head_server_config}).url
    host, port = getattr(head_server_config, "host", None), getattr(head_server_config, "port", None)
    if host is None or port is None:
        raise TypeError(
            f"head_server_config must be a URL ('http://127.0.0.1:11000'), a mapping with host and port, or an "
            f"object with .host and .port; got {type(head_server_config).__name__}"
        )
    return head_server({"head_server": {"host": host, "port": port}}).url


class RolloutCollectionHelper:
    """Runs rows through their agents (`/run`) with ng_collect_rollouts' retry, timeout and failure rules.

    `head_server_config` is where `ng_run`'s head server is (see `head_server_url`); the policy arguments default
    to ng_collect_rollouts' defaults (3 attempts, 1800 s per attempt, 1 s backoff base).
    """

    def __init__(self, head_server_config: Any = None, *,
                 max_attempts: int = _DEFAULTS["max_attempts"].default,
                 rollout_timeout_s: float = _DEFAULTS["rollout_timeout_s"].default,
                 retry_backoff_s: float = _DEFAULTS["retry_backoff_s"].default,
                 num_samples_in_parallel: int = _DEFAULTS["num_samples_in_parallel"].default) -> None:
        self.head_server_url = head_server_url(head_server_config)
        self.policy = RolloutPolicy(max_attempts, rollout_timeout_s, retry_backoff_s)
        self.num_samples_in_parallel = num_samples_in_parallel
        self._engines: dict[str, RolloutEngine] = {}  # per head server: one HTTP client, lookup and limit each

    def for_prompt_groups(self, group_timeout_s: float | None) -> "RolloutCollectionHelper":
        """This helper as a caller that retries whole prompt groups needs it: the group attempt is that path's one
        retry (docs/architecture.md, "Retry budget"), so each rollout runs once, its deadline within the group's."""
        rollout_timeout_s = self.policy.rollout_timeout_s
        if group_timeout_s is not None:
            rollout_timeout_s = min(rollout_timeout_s, group_timeout_s)
        return RolloutCollectionHelper(self.head_server_url, max_attempts=1, rollout_timeout_s=rollout_timeout_s,
                                       retry_backoff_s=self.policy.retry_backoff_s,
                                       num_samples_in_parallel=self.num_samples_in_parallel)

    def run_examples(self, examples: Iterable[dict[str, Any]], head_server_config: Any = None,
                     semaphore: asyncio.Semaphore | None = None, *, num_samples_in_parallel: int | None = None,
                     return_failures: bool = False) -> RolloutStream:
        """Run every row of `examples` (each with `agent_ref.name`), pulling rows only as slots free up.

        Concurrency: `num_samples_in_parallel` if given; else `semaphore` alone (held per row from dispatch until
        its result is handed over, so it can bound several streams at once); else the helper's
        `num_samples_in_parallel`, one limit shared by every such stream of this helper. Nothing
        starts until the result is iterated: `async for row, result in ...`, or NeMo Gym's
        `for future in ...: row, result = await future` for a list. See `RolloutStream`.
        """
        head = self.head_server_url if head_server_config is None else head_server_url(head_server_config)
        if head not in self._engines:
            self._engines[head] = RolloutEngine.connect(head, self.policy, self.num_samples_in_parallel)
        return RolloutStream(examples, self._engines[head], num_samples_in_parallel, semaphore, return_failures)

    async def run_from_config(self, config: RolloutCollectionConfig,
                              progress_stream: TextIO = sys.stderr) -> CollectionSummary:
        """Exactly what ng_collect_rollouts runs (files, resume, failures, manifest, metrics); the head server is
        the config's `head_server_url`. A config built in code was checked when it was constructed."""
        return await collect_rollouts(config, progress_stream)


def _input_files(config: RolloutAggregationConfig) -> list[Path]:
    output = Path(config.output_jsonl_fpath).resolve()
    files = [path for path in rollout_files(config.input_glob)
             if not (config.merge_shards and path.resolve() == output)]
    if not files:
        raise NemoGymError(f"+input_glob={config.input_glob} matches no rollout files")
    return files


class EnvironmentMetricsSkipped(DownstreamError):
    """No server answered for an environment's own metrics: everything else was written without them."""


class RolloutAggregationHelper:
    """What ng_aggregate_rollouts does: merge shards and compute metrics over their union, in one pass."""

    async def run_from_config(self, config: RolloutAggregationConfig) -> Path:
        """Returns the `<stem>_aggregate_metrics.json` path (the report is next to it). Raises
        `EnvironmentMetricsSkipped`, after writing the merged rollouts, the library metrics and the report, when no
        server answered for an environment's own metrics."""
        files = _input_files(config)
        console.say(f"aggregating {len(files)} file(s): {', '.join(map(str, files))}")
        output = None
        if config.merge_shards:
            output = Path(config.output_jsonl_fpath)
            output.parent.mkdir(parents=True, exist_ok=True)
        http = HttpClient()
        try:
            result = await aggregate_rollouts(files, config.aggregate_metrics_fpath,
                                              ServerClient(config.head_server_url, http), merge_into=output)
        finally:
            await http.aclose()
        if result.merged is not None:
            dropped = f"; dropped {result.merged.duplicates} duplicate rollouts" if result.merged.duplicates else ""
            failed = f"; {result.merged.failures} outstanding failures" if result.merged.failures else ""
            console.say(f"merged {result.merged.rows} rollouts into {output}{dropped}{failed}")
        console.say(f"metrics: {result.path}\nreport: {result.report_path}")
        for line in headline_lines(result.summaries):
            console.say(line)
        skipped = result.skipped_message()
        if skipped:
            raise EnvironmentMetricsSkipped(skipped)
        return result.path

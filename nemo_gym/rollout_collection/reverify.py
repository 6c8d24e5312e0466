"""ng_reverify_rollouts: verify the rollouts of a finished run again, without the model, into a new run.

Each rollout to re-verify (`reverify_plan`) goes to the /verify of its agent's environment (the agent's
`resources_server`, read from the head server's config) with the body its agent sent; the policy model is never
called. The new run is written the way a collection writes one, by the same Runner: one flushed line per outcome,
its output locked while it runs, each key at most once in it, attempts counted across resumed runs, a failed
verification kept with its rollout (so that it can be verified again), and metrics by the one aggregation. The
finished run is only read (and held against a collector writing it meanwhile); its materialized inputs are copied
beside the new output, so that the new run can be re-verified in turn.

A verify that reads state the rollout left in its environment (a multi-turn game's session) cannot be redone from
the files: re-verification is for environments whose verify reads only the row and the response.
"""

import dataclasses
import fcntl
import hashlib
import os
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Generator, Iterator, TextIO

import orjson

from nemo_gym import console
from nemo_gym.config.servers import parse_server_tree
from nemo_gym.errors import DownstreamError, NemoGymError
from nemo_gym.http_client import HttpClient
from nemo_gym.rollout_collection.aggregate import aggregate_rollouts
from nemo_gym.rollout_collection.collect import AGENT_KIND, CollectionSummary, print_summary
from nemo_gym.rollout_collection.config import RolloutReverificationConfig
from nemo_gym.rollout_collection.engine import RolloutEngine
from nemo_gym.rollout_collection.keys import KeySet
from nemo_gym.rollout_collection.progress import Progress
from nemo_gym.rollout_collection.resume_check import check_fresh, config_changes, file_size
from nemo_gym.rollout_collection.reverify_plan import Key, RowAction, Survey, plan_steps, survey
from nemo_gym.rollout_collection.rollout import RolloutFailure, RolloutPolicy, RolloutSuccess
from nemo_gym.rollout_collection.runner import Runner
from nemo_gym.rollout_collection.store import (
    AppendFile,
    lock_output,
    previous_attempts,
    repair_torn_tail,
    scan_done,
)
from nemo_gym.run_files.failures import latest_failures
from nemo_gym.run_files.manifest import write_manifest
from nemo_gym.run_files.paths import RunPaths
from nemo_gym.run_format import MANIFEST_FINGERPRINT, MANIFEST_SHARD_ROLLOUTS
from nemo_gym.server.client import ServerClient


class VerifyEngine(RolloutEngine):
    """Posts each row to the /verify of its agent's environment instead of to the agent's /run."""

    def __init__(self, servers: ServerClient, policy: RolloutPolicy, environments: dict[str, str]) -> None:
        super().__init__(servers, policy)
        self.environments = environments  # agent -> its resources server

    async def url_of(self, agent: str) -> str:
        return f"{await self.servers.url(self.environments[agent])}/verify"

    async def run(self, agent: str, row: dict[str, Any], attempts: int | None = None
                  ) -> RolloutSuccess | RolloutFailure:
        outcome = await super().run(agent, row, attempts)
        if isinstance(outcome, RolloutFailure) and outcome.reply is None:
            # However it failed, the record keeps the rollout, so a later re-verification can still do it.
            return dataclasses.replace(outcome, reply=row)
        return outcome


async def agent_environments(servers: ServerClient) -> dict[str, str]:
    """Each agent of the running config -> the resources server its rollouts are verified by."""
    specs = parse_server_tree(await servers.global_config())
    return {name: spec.settings["resources_server"]["name"] for name, spec in specs.items()
            if spec.kind == AGENT_KIND and isinstance(spec.settings.get("resources_server"), dict)}


def _steps(config: RolloutReverificationConfig) -> Generator[RowAction, None, None]:
    return plan_steps(Path(config.input_jsonl_fpath), config.source_materialized_fpath, config.failed_only)


def _source_sha256(config: RolloutReverificationConfig) -> str:
    """One digest of the finished run's files: a resume must re-verify the same run."""
    digest = hashlib.sha256()
    source = RunPaths(config.input_jsonl_fpath)
    for path in (config.source_materialized_fpath, source.rollouts, source.failures):
        digest.update(path.name.encode() + b"\0")
        if path.is_file():
            with open(path, "rb") as file:
                while chunk := file.read(1 << 20):
                    digest.update(chunk)
    return digest.hexdigest()


def _hold_source(path: Path) -> int:
    """A shared lock on the finished run's rollouts file: a collector writing it holds an exclusive one."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise NemoGymError(f"a collector is writing {path}; re-verify it once that run has finished") from None
    return fd


def _check_source(config: RolloutReverificationConfig) -> None:
    for path, what in ((Path(config.input_jsonl_fpath), "rollouts file"),
                       (config.source_materialized_fpath, "materialized inputs (+input_materialized_jsonl_fpath)")):
        if not path.is_file():
            raise NemoGymError(f"{path} not found: re-verification reads the finished run's {what}")


async def _check_environments(servers: ServerClient, plan: Survey) -> dict[str, str]:
    """Every agent whose rollouts are re-verified, and its environment, must be running (before anything starts)."""
    environments = await agent_environments(servers)
    unknown = sorted(plan.agents - set(environments))
    if unknown:
        raise NemoGymError(f"the run holds rollouts of agent(s) {', '.join(unknown)}, which the head server at "
                           f"{servers.head_url} does not run (its agents: {', '.join(sorted(environments)) or 'none'})")
    for agent in sorted(plan.agents):
        await servers.url(environments[agent])
    return environments


def _copy_inputs(source: Path, dest: Path) -> None:
    """The new run's materialized inputs are the finished run's (written whole, then renamed into place)."""
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    try:
        with open(source, "rb") as src, open(tmp, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _prepare(config: RolloutReverificationConfig, plan: Survey) -> tuple[AppendFile, KeySet, dict, set[Key]]:
    """Lock the new output, check or resume its state, then write its materialized inputs and manifest. Also the
    keys its failures file holds already (a resumed run's carried records among them)."""
    config.output_path.parent.mkdir(parents=True, exist_ok=True)
    output = lock_output(config.output_path)
    try:
        fp = {"reverify_of": str(Path(config.input_jsonl_fpath).resolve()), "source_sha256": _source_sha256(config),
              "failed_only": config.failed_only}
        if config.resume_from_cache:
            changes = config_changes(config, fp)
            if changes:
                raise NemoGymError(f"refusing to resume {config.output_path}: it re-verifies another run or the run "
                                   f"changed ({'; '.join(changes)}); use a new +output_jsonl_fpath")
            for path in (config.output_path, config.failures_jsonl_fpath):
                if repair_torn_tail(path):
                    console.say(f"repaired {path}: dropped a torn last line left by an interrupted run")
            done = scan_done(config.output_path, plan.rollouts_per_task).done
            prior = previous_attempts(config.failures_jsonl_fpath, done)
            recorded = set(latest_failures([config.failures_jsonl_fpath], done))
        else:
            check_fresh(config)
            done, prior, recorded = KeySet(plan.rollouts_per_task), {}, set()
        _copy_inputs(config.source_materialized_fpath, config.run_paths.materialized_inputs)
        write_manifest(config.manifest_fpath, {
            MANIFEST_FINGERPRINT: fp, "input_jsonl_fpath": config.input_jsonl_fpath,
            MANIFEST_SHARD_ROLLOUTS: plan.actions["verify"] + plan.actions["copy"],
            "actions": dict(plan.actions), "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        })
        return output, done, prior, recorded
    except BaseException:
        output.close()
        raise


class _PassThrough:
    """Writes the steps that need no verification (copies, carried failures) as the runner's workers pull the
    rest: one pass over the run, in key order. A failure that `recorded` (the failures file) holds already was
    carried by an earlier run of this re-verification: it is not carried again."""

    def __init__(self, output: AppendFile, failures: AppendFile, done: KeySet, recorded: set[Key],
                 progress: Progress) -> None:
        self.output, self.failures, self.done, self.recorded, self.progress = output, failures, done, recorded, progress
        self.copied = 0

    def to_verify(self, steps: Iterator[RowAction]) -> Iterator[bytes]:
        """The /verify bodies of the steps to verify that are not done yet; the other steps written on the way."""
        for step in steps:
            if step.key in self.done or step.action == "missing":
                continue
            if step.action == "verify":
                yield step.verify_body()
            elif step.action == "copy":
                line = step.source_line if step.source_line.endswith(b"\n") else step.source_line + b"\n"
                self.output.write_line(line)
                self.done.add(*step.key)
                self.copied += 1
                self.progress.record_success(float(orjson.loads(line)["reward"]))
            elif step.key not in self.recorded:  # carry: the next run's failures file starts from it
                self.failures.write_line(step.source_line)


async def reverify_rollouts(config: RolloutReverificationConfig,
                            progress_stream: TextIO = sys.stderr) -> CollectionSummary:
    """Re-verify the run of `config.input_jsonl_fpath` into `config.output_jsonl_fpath`; the library entry point
    behind ng_reverify_rollouts."""
    _check_source(config)
    source_lock = _hold_source(Path(config.input_jsonl_fpath))
    # One attempt per request (the client's default): the runner counts attempts itself, across runs.
    http = HttpClient(read_timeout_s=config.verify_timeout_s, max_connections=config.num_samples_in_parallel + 16)
    try:
        servers = ServerClient(config.head_server_url, http)
        with closing(_steps(config)) as steps:
            plan = survey(steps)
        environments = await _check_environments(servers, plan)
        output, done, prior, recorded = _prepare(config, plan)
        summary = await _run(config, plan, servers, environments, output, done, prior, recorded, progress_stream)
        if not config.disable_aggregation and file_size(config.output_path):
            try:
                result = await aggregate_rollouts([config.output_path], config.aggregate_metrics_fpath, servers)
                summary.aggregate_metrics_fpath, summary.metric_summaries = result.path, result.summaries
            except (NemoGymError, DownstreamError) as exc:
                summary.aggregation_error = str(exc)
        print_summary(summary)
        if plan.actions["carry"]:
            console.say(f"  {plan.actions['carry']} of the run's rollouts failed before they were verified: no "
                        f"re-verification can redo them; resume the collection of {config.input_jsonl_fpath} for those")
        if plan.actions["missing"]:
            console.warn(f"{plan.actions['missing']} rollouts of the run were never finished (in neither its "
                         f"output nor its failures file); resume its collection first to include them")
    finally:
        await http.aclose()
        os.close(source_lock)
    return summary


async def _run(config: RolloutReverificationConfig, plan: Survey, servers: ServerClient,
               environments: dict[str, str], output: AppendFile, done: KeySet, prior: dict, recorded: set[Key],
               progress_stream: TextIO) -> CollectionSummary:
    total = plan.actions["verify"] + plan.actions["copy"]
    progress = Progress(total, len(done), config.progress_interval_s, progress_stream)
    failures = AppendFile(config.failures_jsonl_fpath)
    policy = RolloutPolicy(config.max_attempts, config.verify_timeout_s, config.retry_backoff_s)
    runner = Runner(VerifyEngine(servers, policy, environments), config.max_total_attempts, output, failures, done,
                    prior, progress)
    passing = _PassThrough(output, failures, done, recorded, progress)
    console.say(f"re-verifying {plan.actions['verify']} rollouts of {config.input_jsonl_fpath}"
         + (f" (copying {plan.actions['copy']} verified ones)" if config.failed_only else "")
         + f", {config.num_samples_in_parallel} in parallel, into {config.output_path}")
    started = time.monotonic()
    progress.start()
    try:
        with closing(_steps(config)) as steps:
            stats = await runner.run(passing.to_verify(steps), config.num_samples_in_parallel)
    except BaseException:
        console.say(f"stopped: every finished verification is saved in {config.output_path}; rerun the same "
                    f"command with +resume_from_cache=true to continue")
        raise
    finally:
        progress.close()
        output.close()
        failures.close()
    return CollectionSummary.finished(config, total=total, already_done=progress.initial,
                                      succeeded=stats.succeeded + passing.copied, stats=stats, done=done,
                                      elapsed_s=time.monotonic() - started, mean_reward=progress.mean_reward)

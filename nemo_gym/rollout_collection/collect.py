"""One collection run, start to finish: check, validate, resume, run, compact failures, aggregate, summarize.

Everything that can be wrong with the request (config, head server, agents, every model endpoint — the preflight —,
input rows, the state of the output) is found before the first rollout, and an error leaves the file system as it
was. While the run goes, `<stem>_progress.json` says where it stands (run_counters.py).
"""

import asyncio
import math
import os
import sys
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from nemo_gym import console
from nemo_gym.compat.head_detect import NEMO_GYM
from nemo_gym.errors import ConfigError, DownstreamError, NemoGymError
from nemo_gym.exit_status import EXIT_DEADLINE, EXIT_DOWNSTREAM, EXIT_RETRY_LATER
from nemo_gym.http_client import HttpClient
from nemo_gym.model_call_replay import ReplayTag, compact_journal, journal_path, new_run_id
from nemo_gym.open_files import allow_open_files_up_to_hard_limit
from nemo_gym.pricing import format_usd, price_table
from nemo_gym.rollout_collection.aggregate import aggregate_rollouts, headline_lines
from nemo_gym.rollout_collection.concurrency import AdaptiveLimit, Fixed, Outcome
from nemo_gym.rollout_collection.deadline import DrainMargin, find_deadline
from nemo_gym.rollout_collection.config import (
    DEFAULT_NUM_SAMPLES_IN_PARALLEL,
    RolloutCollectionConfig,
    RolloutReverificationConfig,
)
from nemo_gym.rollout_collection.inputs import InputPlan, materialize_inputs
from nemo_gym.rollout_collection.keys import KeySet
from nemo_gym.rollout_collection.engine_level import EngineLevel, start_level
from nemo_gym.rollout_collection.knee import AUTOMATIC_CEILING, MIN_WINDOW, ThroughputKnee, first_level
from nemo_gym.rollout_collection.dry_run import plan_collection
from nemo_gym.rollout_collection.model_server_stats import ModelServerStats
from nemo_gym.rollout_collection.engine import RolloutEngine
from nemo_gym.rollout_collection.manifest import fingerprint, manifest_of
from nemo_gym.rollout_collection.preflight import preflight_servers
from nemo_gym.rollout_collection.progress import Progress
from nemo_gym.rollout_collection.progress_file import INTERRUPTED, STOPPED
from nemo_gym.rollout_collection.resume_check import check_fresh, config_changes, file_size, resume_refusal
from nemo_gym.rollout_collection.prompt import PromptConfig, load_prompt_config
from nemo_gym.rollout_collection.retry_budget import EndpointRefused, RetryBudget, RunStopped
from nemo_gym.rollout_collection.rollout import RolloutPolicy
from nemo_gym.rollout_collection.run_counters import ProgressFileTicker, RunCounters
from nemo_gym.rollout_collection.runner import Runner, RunStats
from nemo_gym.rollout_collection.spend import BUDGET_CHECK, Spend
from nemo_gym.rollout_collection.run_log import RunLog
from nemo_gym.rollout_collection.store import (
    AppendFile,
    compact_failures,
    lock_output,
    previous_attempts,
    repair_torn_tail,
    scan_done,
)
from nemo_gym.rollout_collection.tokens import TokenTally
from nemo_gym.rollout_collection.wandb_upload import WandbUploader, require_wandb_login, start_wandb_upload
from nemo_gym.run_files.manifest import write_manifest
from nemo_gym.run_files.paths import report_path
from nemo_gym.run_files.rows import iter_lines
from nemo_gym.server.client import ServerClient

AGENT_KIND = "responses_api_agents"
SAY_LEVEL_EVERY_S = 10.0  # the console says a change of the level at most this often (a 429 cut always)
RESUME_HINT = "rerun the same command with +resume_from_cache=true"
DEADLINE = "deadline"  # the name of the drain margin's start check


@dataclass
class CollectionSummary:
    """What a run did; `ok` is False when rollouts are still failed or aggregation did not finish."""

    output_jsonl_fpath: Path
    failures_jsonl_fpath: Path
    total: int  # rollouts this run (this shard) is responsible for
    already_done: int  # found in the output when the run started
    succeeded: int
    failed: int  # failures still outstanding at the end, including ones out of attempts
    failures_by_class: dict[str, int] = field(default_factory=dict)
    exhausted: int = 0  # failed rollouts not retried because they used up +max_total_attempts
    max_total_attempts: int = 0
    elapsed_s: float = 0.0
    rollouts_per_s: float = 0.0  # finished (succeeded or failed) rollouts of this run per second
    mean_reward: float | None = None
    aggregate_metrics_fpath: Path | None = None
    metric_summaries: list[dict] = field(default_factory=list)  # per agent: agent_ref, agent_metrics, key_metrics
    aggregation_error: str | None = None
    dry_run: bool = False  # +dry_run=true: validated and planned, nothing run
    tokens: TokenTally = field(default_factory=TokenTally)  # usage reported by this run's rollouts
    spend: Spend | None = None  # what the output's rollouts cost (earlier runs' included), and the budget
    stopped_starting: str | None = None  # why the run started no more rollouts (it drained; a resume goes on)
    stopped_by: str | None = None  # which start check said so: DEADLINE, or another (runner.Runner.start_checks)
    cut_at_deadline: int = 0  # rollouts still running at the deadline, stopped there (they run again on resume)
    attempted: int = 0  # rollouts this run finished, succeeded or failed
    replayed_calls: int = 0  # model calls answered from the replay journal, not sent again

    @classmethod
    def planned(cls, config: RolloutCollectionConfig, rollouts: int) -> "CollectionSummary":
        """What a dry run reports: the rollouts it would run, none run."""
        return cls(config.output_path, config.failures_jsonl_fpath, total=rollouts, already_done=0, succeeded=0,
                   failed=0, dry_run=True)

    @classmethod
    def finished(cls, config: RolloutCollectionConfig | RolloutReverificationConfig, *, total: int, already_done: int,
                 succeeded: int, stats: RunStats, done: KeySet, elapsed_s: float, mean_reward: float | None,
                 tokens: TokenTally | None = None) -> "CollectionSummary":
        """What a run that went to its end did: the failures still outstanding are compacted in their file first."""
        outstanding = compact_failures(config.failures_jsonl_fpath, done)
        return cls(config.output_path, config.failures_jsonl_fpath, total=total, already_done=already_done,
                   succeeded=succeeded, failed=outstanding.count, failures_by_class=dict(outstanding.by_class),
                   exhausted=stats.exhausted, max_total_attempts=config.max_total_attempts, elapsed_s=elapsed_s,
                   rollouts_per_s=(stats.succeeded + stats.failed) / elapsed_s if elapsed_s > 0 else 0.0,
                   mean_reward=mean_reward, tokens=tokens or TokenTally(), stopped_starting=stats.stopped_starting,
                   stopped_by=stats.stopped_by, attempted=stats.succeeded + stats.failed,
                   replayed_calls=stats.replayed_calls)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.aggregation_error is None and self.stopped_starting is None

    @property
    def exit_status(self) -> int:
        """0: every rollout done; EXIT_DEADLINE: drained before the deadline with progress made (resume, or requeue);
        EXIT_RETRY_LATER: stopped starting for another reason; 1: failures left, or a deadline that left no time to
        finish one rollout (requeueing that would loop)."""
        if self.stopped_by == DEADLINE:
            return EXIT_DEADLINE if self.attempted > 0 else EXIT_DOWNSTREAM
        if self.stopped_starting is not None:
            return EXIT_RETRY_LATER
        return 0 if self.ok else EXIT_DOWNSTREAM


@dataclass
class _RunState:
    plan: InputPlan
    output: AppendFile
    done: KeySet
    prior_attempts: dict[tuple[int, int], int]


async def _agent_urls(servers: ServerClient) -> dict[str, str]:
    listing = await servers.servers()  # raises a one-line error at once when the head server is unreachable
    agents = {name: entry["url"] for name, entry in listing.items() if entry.get("kind") == AGENT_KIND}
    if not agents:
        raise NemoGymError(f"the head server at {servers.head_url} lists no agent servers ({AGENT_KIND})")
    return agents


def _resume(config: RolloutCollectionConfig, plan: InputPlan, fp: dict) -> tuple[KeySet, dict[tuple[int, int], int]]:
    output, failures = config.output_path, config.failures_jsonl_fpath
    changes = config_changes(config, fp)
    if changes is not None:
        if changes and not config.resume_ignore_config_change:
            raise resume_refusal(config.output_path, changes)
        if changes:
            console.warn(f"resuming despite config changes ({'; '.join(changes)})")
    for path in (output, failures):
        dropped = repair_torn_tail(path)
        if dropped:
            console.say(f"repaired {path}: dropped a torn last line ({dropped} bytes) left by an interrupted run")
    scan = scan_done(output, plan.rollouts_per_task)
    if scan.duplicates:
        console.warn(f"{output} holds {scan.duplicates} duplicate rollout rows (written by something else)")
    if scan.outside:
        console.warn(f"{output} holds {scan.outside} rollouts this run's config does not produce")
    prior = previous_attempts(failures, scan.done)
    console.say(f"resuming: {len(scan.done)} rollouts already in {output}; {len(prior)} failed ones will be retried")
    return scan.done, prior


def _missing_dirs(path: Path) -> list[Path]:
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    return missing


def _prepare(config: RolloutCollectionConfig, agents: set[str], prompt: PromptConfig | None,
             seed_top_level: bool = True) -> _RunState:
    """Validate, lock the output, check or resume its state, then commit the materialized inputs and manifest."""
    output = config.output_path
    created = _missing_dirs(output.parent)
    output.parent.mkdir(parents=True, exist_ok=True)
    created += _missing_dirs(config.materialized_path.parent)  # +materialized_jsonl_fpath may be elsewhere
    config.materialized_path.parent.mkdir(parents=True, exist_ok=True)
    existed = output.exists()
    tmp = config.materialized_path.with_name(f"{config.materialized_path.name}.{os.getpid()}.tmp")
    out_file: AppendFile | None = None
    try:
        with open(tmp, "wb", buffering=1 << 20) as materialized:
            plan = materialize_inputs(config, Path(config.input_jsonl_fpath), config.agent_name, agents, prompt,
                                      materialized, seed_top_level)
        out_file = lock_output(output)
        # Left by a run killed while validating; only the lock holder may clean up.
        for stale in tmp.parent.glob(f"{config.materialized_path.name}.*.tmp"):
            if stale != tmp:
                stale.unlink(missing_ok=True)
        fp = fingerprint(config, config.agent_name, plan, prompt)
        if config.resume_from_cache:
            done, prior = _resume(config, plan, fp)
        else:
            check_fresh(config)
            done, prior = KeySet(plan.rollouts_per_task), {}
        os.replace(tmp, config.materialized_path)
        write_manifest(config.manifest_fpath, manifest_of(fp, config.input_jsonl_fpath, plan))
        return _RunState(plan, out_file, done, prior)
    except BaseException:
        tmp.unlink(missing_ok=True)
        if out_file is not None:
            out_file.close()
        if not existed and file_size(output) == 0:
            output.unlink(missing_ok=True)
        for directory in created:
            try:
                directory.rmdir()
            except OSError:
                break  # something else put files there meanwhile: leave it
        raise


def _check_paths(config: RolloutCollectionConfig) -> None:
    if config.upload_rollouts_to_wandb:
        require_wandb_login()
    if Path(config.input_jsonl_fpath).resolve() == config.output_path.resolve():
        raise ConfigError("+output_jsonl_fpath must differ from +input_jsonl_fpath")
    price_table(config.prices_fpath)  # a malformed price table is refused before anything is written


async def collect_rollouts(config: RolloutCollectionConfig, progress_stream: TextIO = sys.stderr) -> CollectionSummary:
    """Collect every rollout of `config` into its output file; the library entry point behind ng_collect_rollouts."""
    _check_paths(config)
    allow_open_files_up_to_hard_limit()  # a socket per rollout in flight
    prompt = load_prompt_config(config.prompt_config) if config.prompt_config else None
    http = HttpClient(
        read_timeout_s=config.rollout_timeout_s,
        max_connections=_ceiling(config) + 16,
    )  # one attempt per request (the client's default): the runner counts attempts itself, across runs
    try:
        servers = ServerClient(config.head_server_url, http)
        agent_urls = await _agent_urls(servers)
        if config.preflight and servers.head_kind != NEMO_GYM:
            await preflight_servers(servers, console.say)
        if config.dry_run:
            plan = plan_collection(config, set(agent_urls), prompt, seed_top_level=servers.head_kind != NEMO_GYM)
            return CollectionSummary.planned(config, plan.shard_rollouts)
        state = _prepare(config, set(agent_urls), prompt, seed_top_level=servers.head_kind != NEMO_GYM)
        with RunLog(config.collect_log_fpath) as log:
            summary = await _collect(config, state, log.tee(progress_stream), servers)
            print_summary(summary)
    finally:
        await http.aclose()
    return summary


async def _collect(config: RolloutCollectionConfig, state: _RunState, progress_stream: TextIO,
                   servers: ServerClient) -> CollectionSummary:
    """Run the rollouts, aggregate their metrics, and finish (or abort) the W&B upload."""
    uploader = start_wandb_upload(config) if config.upload_rollouts_to_wandb else None
    try:
        summary = await _run(config, state, servers, progress_stream, uploader)
        if not config.disable_aggregation:
            await _aggregate(config, summary, servers)
    except BaseException:
        if uploader:
            uploader.abort()
        raise
    if uploader:
        uploader.finish(summary.metric_summaries,
                        [config.aggregate_metrics_fpath, report_path(config.aggregate_metrics_fpath)])
    return summary


async def _run(config: RolloutCollectionConfig, state: _RunState, servers: ServerClient, progress_stream: TextIO,
               uploader: WandbUploader | None = None) -> CollectionSummary:
    plan = state.plan
    progress = Progress(plan.shard_rollouts, min(len(state.done), plan.shard_rollouts), config.progress_interval_s,
                        progress_stream)
    engine = RolloutEngine(servers, RolloutPolicy.from_config(config))
    engine.run_budget = budget = RetryBudget(max_failure_rate=config.max_failure_rate,
                                             pause_s=config.failure_pause_s, retry_ratio=config.retry_budget,
                                             say=console.say)
    counters = RunCounters()
    live = await ModelServerStats.of_run(servers)  # the model servers' counts before the first rollout
    limit = _concurrency(config, plan.shard_rollouts - progress.initial, live)
    counters.live_rate_limited = lambda: live.count
    counters.live_replicas = lambda: live.replicas
    counters.live_engine = lambda: asdict(load) if (load := live.fleet_load()) else None
    progress.detail = lambda: _detail(limit, counters)
    failures = AppendFile(config.failures_jsonl_fpath)
    runner = Runner(engine, config.max_total_attempts, state.output, failures, state.done, state.prior_attempts,
                    progress, limit=limit, counters=counters)
    ticker = ProgressFileTicker(config.run_paths.progress, config.output_path, progress, counters, limit, budget)
    tokens = TokenTally()
    runner.row_listeners.append(tokens.on_row)
    margin = _drain_margin(config, runner)
    journal = _replay_journal(config, runner, state.done) if servers.head_kind != NEMO_GYM else None
    spend = _spend(config, runner, counters)
    if uploader:
        runner.row_listeners.append(uploader.on_row)
    in_parallel = (f"up to {config.num_samples_in_parallel} in parallel, from {limit.level}: {limit.policy.reason}"
                   if config.adaptive_concurrency else f"{config.num_samples_in_parallel} in parallel")
    console.say(f"collecting {plan.shard_rollouts - progress.initial} of {plan.shard_rollouts} rollouts "
                f"({in_parallel}) into {config.output_path}; progress in {config.run_paths.progress}")
    started = time.monotonic()
    progress.start()
    ticker.start()
    live.start()
    cut = 0
    try:
        with closing(iter_lines(config.materialized_path)) as lines:
            assert config.num_samples_in_parallel is not None, "its validator turns null into the default"
            try:
                async with asyncio.timeout(margin.deadline.left_s() if margin else None):
                    stats = await runner.run((line for _, _, line in lines), config.num_samples_in_parallel)
            except TimeoutError:
                if margin is None or margin.deadline.left_s() > 0:
                    raise  # not the deadline's
                stats, cut = runner.stats, counters.in_flight
                stats.stopped_starting = stats.stopped_starting or margin.check()
                stats.stopped_by = DEADLINE
        budget.raise_if_stopped()
    except BaseException as exc:
        live.stop()
        stopped = isinstance(exc, RunStopped)
        if stopped:
            await live.poll()  # the 429s it stopped on, in the last line and snapshot
        ticker.close(STOPPED if stopped else INTERRUPTED, str(exc))
        when = " once the endpoint serves again" if isinstance(exc, EndpointRefused) else ""
        console.say(f"stopped: every finished rollout is saved in {config.output_path}; {RESUME_HINT} to "
                    f"continue{when}")
        raise
    else:
        live.stop()
        await live.poll()
        if stats.stopped_starting is None:
            ticker.close()
        else:
            ticker.close(STOPPED, f"stopped starting rollouts: {stats.stopped_starting}")
        for line in live.troubled_replicas():
            console.say(line)
    finally:
        progress.close()
        state.output.close()
        failures.close()
    if journal is not None:
        compact_journal(journal, lambda key: key not in state.done)
    summary = CollectionSummary.finished(config, total=plan.shard_rollouts, already_done=progress.initial,
                                         succeeded=stats.succeeded, stats=stats, done=state.done,
                                         elapsed_s=time.monotonic() - started, mean_reward=progress.mean_reward,
                                         tokens=tokens)
    summary.cut_at_deadline = cut
    summary.spend = spend
    return summary


def _spend(config: RolloutCollectionConfig, runner: Runner, counters: RunCounters) -> Spend:
    """The run's money: each rollout priced as it is written, earlier runs' rollouts counted on a resume, and the
    +max_cost_usd budget asked before each rollout starts (spend.py)."""
    spend = Spend(price_table(config.prices_fpath), config.max_cost_usd, lambda: counters.in_flight)
    if config.resume_from_cache:
        spend.add_earlier(config.output_path)
    runner.row_preparers.append(spend.price)
    counters.live_cost = spend.snapshot
    if config.max_cost_usd is not None:
        runner.start_checks[BUDGET_CHECK] = spend.check_budget
        console.say(f"budget +max_cost_usd={config.max_cost_usd:g}: {format_usd(spend.total.usd)} spent so far; "
                    f"no rollout starts that could pass it")
    return spend


def _replay_journal(config: RolloutCollectionConfig, runner: Runner, done: KeySet) -> Path | None:
    """With +replay_model_calls, the run's replay journal, compacted to the rollouts not in the output (a fresh
    run's is emptied), and its tag set on the runner (model_call_replay.py)."""
    if not config.replay_model_calls:
        return None
    journal = journal_path(config.output_path).resolve()
    kept = compact_journal(journal, lambda key: config.resume_from_cache and key not in done)
    if kept:
        console.say(f"replay: {kept} model calls of unfinished rollouts are recorded in {journal}; the same calls "
                    f"are answered from there")
    runner.replay = ReplayTag((0, 0), new_run_id(), str(journal))
    return journal


def _drain_margin(config: RolloutCollectionConfig, runner: Runner) -> DrainMargin | None:
    """The run's drain margin, asked before each rollout starts, where the run has a deadline (deadline.py)."""
    try:
        deadline = find_deadline(config.deadline, config.deadline_lead_s)
    except DownstreamError as exc:  # Slurm's end time, unread: the job's own SIGTERM still stops the run cleanly
        console.warn(f"no drain margin before the job's end: {exc}")
        return None
    if deadline is None:
        return None
    margin = DrainMargin(deadline)
    runner.start_checks[DEADLINE] = margin.check
    runner.duration_listeners.append(margin.observe)
    lead = f", less {config.deadline_lead_s:g} s" if config.deadline_lead_s else ""
    console.say(f"deadline {deadline.clock()} ({deadline.source}{lead}): no rollout starts once the time left is "
                f"shorter than the p95 rollout")
    return margin


def _ceiling(config: RolloutCollectionConfig) -> int:
    """The most rollouts in flight: num_samples_in_parallel where it was given; else, with adaptive concurrency,
    AUTOMATIC_CEILING (the level stops where the throughput stops growing, knee.py), and without it the default."""
    if config.adaptive_concurrency and "num_samples_in_parallel" not in config.model_fields_set:
        return AUTOMATIC_CEILING
    return config.num_samples_in_parallel or DEFAULT_NUM_SAMPLES_IN_PARALLEL  # the config's validator made it set


def _concurrency(config: RolloutCollectionConfig, rollouts: int, live: ModelServerStats) -> AdaptiveLimit:
    """The in-flight limit of a run of `rollouts`: fixed, or automatic up to its ceiling (each change said as it
    happens): from vLLM's own signals where every model server reads them (engine_level.py), else by the
    throughput knee (knee.py); a run too short to measure starts with all its rollouts in flight."""
    ceiling = _ceiling(config)
    if not config.adaptive_concurrency:
        return AdaptiveLimit(ceiling, Fixed(), initial=ceiling)
    load = live.fleet_load()
    short = rollouts < MIN_WINDOW
    policy: ThroughputKnee | EngineLevel
    if load is None:
        policy = ThroughputKnee(ceiling)
        limit = AdaptiveLimit(ceiling, policy, initial=first_level(rollouts, ceiling))
    else:
        start = first_level(rollouts, ceiling) if short else start_level(load, ceiling)
        policy = EngineLevel(ceiling, start, load)
        limit = AdaptiveLimit(ceiling, policy, initial=start)

        def follow_vllm() -> None:
            if (now := live.fleet_load()) is not None:
                policy.observe(now, limit.level, limit.in_flight)

        live.listeners.append(follow_vllm)
    if short:
        policy.reason = f"{rollouts} rollouts, too few to measure a level by: as many at once as the ceiling allows"
    said_at = -math.inf

    def say_change(old: int, new: int, outcome: Outcome) -> None:
        nonlocal said_at
        if outcome.rate_limited and new < old:
            console.say(f"concurrency {old} -> {new} (ceiling {ceiling}): a rollout met {outcome.rate_limited} 429s")
        elif time.monotonic() - said_at >= SAY_LEVEL_EVERY_S:
            said_at = time.monotonic()
            console.say(f"concurrency {old} -> {new} (ceiling {ceiling}): {policy.reason}")

    limit.listeners.append(say_change)
    return limit


def _detail(limit: AdaptiveLimit, counters: RunCounters) -> str:
    """What a progress line adds: the concurrency, and the 429s and retries so far."""
    return (f"{limit.in_flight} in flight (level {limit.level}/{limit.ceiling}), {counters.rate_limited_so_far} 429s, "
            f"{counters.rollout_retries + counters.model_call_retries} retries")


async def _aggregate(config: RolloutCollectionConfig, summary: CollectionSummary, servers: ServerClient) -> None:
    if not file_size(config.output_path):
        return  # nothing succeeded (or an empty shard): no metrics, and the failures already say why
    try:
        result = await aggregate_rollouts([config.output_path], config.aggregate_metrics_fpath, servers)
    except (NemoGymError, DownstreamError) as exc:
        summary.aggregation_error = str(exc)
        return
    summary.aggregate_metrics_fpath = result.path
    summary.metric_summaries = result.summaries
    summary.aggregation_error = result.skipped_message()


def done_line(summary: CollectionSummary) -> str:
    """`done: N rollouts collected in T s (...)`, then, where it is not all of them, what the output holds."""
    mean = "n/a" if summary.mean_reward is None else f"{summary.mean_reward:.4f}"
    line = (f"done: {summary.succeeded} rollouts collected in {summary.elapsed_s:.1f} s "
            f"({summary.rollouts_per_s:.1f}/s, mean reward {mean})")
    held = summary.already_done + summary.succeeded
    if summary.already_done:
        line += f"; {summary.already_done} were already in the output"
    if summary.already_done or held != summary.total:
        line += f"; the output holds {held} of this run's {summary.total} rollouts"
    if summary.failed:
        line += f"; {summary.failed} failed"
    return line


def print_summary(summary: CollectionSummary) -> None:
    console.say(done_line(summary))
    token_line = summary.tokens.summary_line(summary.elapsed_s)
    if token_line:
        console.say(token_line)
    if summary.replayed_calls:
        console.say(f"replay: {summary.replayed_calls} model calls were answered as an earlier run had recorded "
                    f"them, not sent again")
    cost_line = summary.spend.summary_line() if summary.spend else None
    if cost_line:
        console.say(cost_line)
    console.say(f"rollouts: {summary.output_jsonl_fpath}")
    if summary.aggregate_metrics_fpath:
        console.say(f"metrics: {summary.aggregate_metrics_fpath}")
        console.say(f"report: {report_path(summary.aggregate_metrics_fpath)}")
    for line in headline_lines(summary.metric_summaries):
        console.say(line)
    if summary.stopped_starting:
        cut = (f"{summary.cut_at_deadline} still running at the deadline were stopped there"
               if summary.cut_at_deadline else "every rollout started finished")
        console.say(f"stopped starting rollouts: {summary.stopped_starting}; {cut}; "
                    f"{summary.total - summary.already_done - summary.succeeded} of this run's rollouts are not in "
                    f"the output yet; {RESUME_HINT} to go on")
        if summary.stopped_by == DEADLINE and not summary.attempted:
            console.say("no rollout finished before the deadline, so a resume on the same terms would not either: "
                        "give the run more time (+deadline, or the Slurm job's --time)")
    if summary.failed:
        classes = ", ".join(f"{cls}: {n}" for cls, n in sorted(summary.failures_by_class.items()))
        console.say(f"FAILED: {summary.failed} rollouts ({classes}); details in {summary.failures_jsonl_fpath}; "
                    f"{RESUME_HINT} to retry them")
        if summary.exhausted:
            console.say(f"  {summary.exhausted} of them were not retried: they used up +max_total_attempts="
                        f"{summary.max_total_attempts}; raise it to try them again")
    if summary.aggregation_error:
        console.say(f"aggregation failed: {summary.aggregation_error}; retry with ng_aggregate_rollouts "
                    f"+input_glob={summary.output_jsonl_fpath} +output_jsonl_fpath={summary.output_jsonl_fpath} "
                    f"+merge_shards=false")

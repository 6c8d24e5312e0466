r"""ng_slurm_submit: collect a run as a SLURM array (one shard per task) plus a dependent job that merges the shards.

    ng_slurm_submit "+config_paths=[nemo_gym/resources_servers/math/configs/math.yaml,configs/vllm_model.yaml]" \
        +policy_base_url=http://node7:8000/v1 \
        +agent_name=math_simple_agent +input_jsonl_fpath=nemo_gym/resources_servers/math/data/arithmetic_example.jsonl +num_repeats=4 +num_samples_in_parallel=64 \
        +run_dir=runs/math +num_shards=8 +slurm.partition=batch +slurm.time=04:00:00 +slurm.cpus_per_task=8
    ng_slurm_submit +run_dir=runs/math +resume=true    # resubmit the shards that did not complete, then aggregate

Own keys: `run_dir`, `num_shards`, `resume`, and `slurm.*` (see SlurmSettings). Every other override goes to
`ng_run` (which starts the servers on each task's node) and to `ng_collect_rollouts`. The rendered job scripts, the
submission record and the shard completion markers are kept under `<run_dir>/slurm/`.
"""

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import orjson
from omegaconf import OmegaConf
from pydantic import Field

from nemo_gym import console
from nemo_gym.cli.common import CommandHelp, run_cli
from nemo_gym.config.global_settings import LoaderSettings
from nemo_gym.config import load_global_config
from nemo_gym.config.loader import parse_overrides, plain_dict
from nemo_gym.config.redact import is_secret_key
from nemo_gym.config.servers import ServerSpec
from nemo_gym.config.typed import Settings, Text, build
from nemo_gym.errors import ConfigError, DownstreamError, NemoGymError
from nemo_gym.exit_status import EXIT_DEADLINE
from nemo_gym.slurm.layout import RunLayout, submission_path
from nemo_gym.slurm.templates import (
    AGGREGATE_TEMPLATE,
    COLLECT_TEMPLATE,
    COMMON_FUNCTIONS,
    DEFAULT_TEMPLATES_DIR,
    read_template,
    render,
)

# The job scripts set these per task; a user value would silently break sharding or resume.
_SET_BY_JOB_SCRIPT = {
    "output_jsonl_fpath", "shard_index", "resume_from_cache", "disable_aggregation", "head_server", "log_dir",
    "input_glob", "merge_shards", "deadline_lead_s",
}
# The collector drains this long before the SIGTERM lead: time for the job script to stop the servers and requeue.
DRAIN_STOP_ALLOWANCE_S = 15
# Slurm may send `--signal` up to this much earlier than asked (its event resolution, documented under --signal).
SLURM_SIGNAL_RESOLUTION_S = 60
# Paths end up in #SBATCH lines, which cannot be quoted, and `%` is a Slurm filename pattern there.
_SAFE_PATH = re.compile(r"^[\w./+:@-]+$")
_SAFE_NAME = re.compile(r"^[\w.+-]+$")


class SubmitError(NemoGymError):
    """The run directory is in a state that cannot be submitted."""


class SlurmCommandError(DownstreamError):
    """sbatch, squeue or scancel failed, or is not installed."""


class SlurmSettings(Settings):
    """`+slurm.<name>=...`: resources and behaviour of the two jobs."""

    job_name: Text | None = None
    """Job name (default: the run directory's name)."""
    partition: Text | None = None
    """Slurm partition."""
    account: Text | None = None
    """Slurm account."""
    time: Text | None = None
    """Time limit per task, e.g. 04:00:00."""
    mem: Text | None = None
    """Memory per task, e.g. 32G."""
    cpus_per_task: int = Field(1, ge=1)
    """CPUs per collect task."""
    aggregate_cpus_per_task: int = Field(1, ge=1)
    """CPUs of the aggregate job."""
    max_parallel: int | None = Field(None, ge=1)
    """At most this many array tasks at once (--array=...%N)."""
    sbatch_args: list[Text] = Field(default_factory=list)
    """More options for both jobs, e.g. [--qos=high]."""
    signal_lead_s: int = Field(60, ge=1)
    """SIGTERM this long before the time limit, so the task stops cleanly (Slurm may send it up to 60 s earlier).
    The collector itself starts no rollout that cannot finish before the earliest of those, less 15 s to stop the
    servers: drained, the task requeues itself."""
    startup_timeout_s: int = Field(1800, ge=1)
    """Seconds for ng_run's start-up on each task, vLLM cold start included."""
    dependency: Literal["afterok", "afterany"] = "afterok"
    """afterany runs the aggregate job even when a task failed (it checks the shards itself)."""
    aggregate_config_paths: list[Text] | None = None
    """Servers for the aggregate job (default: config_paths)."""
    templates_dir: Text | None = None
    """Folder with your own job script templates."""
    dry_run: bool = False
    """Render the scripts and print the sbatch commands; submit nothing."""


class SubmitSettings(Settings):
    """This command's own keys; every other override goes to ng_run and ng_collect_rollouts on each task."""

    run_dir: Text
    """Directory for this run's shards, logs, job scripts and submission record."""
    num_shards: int | None = Field(None, ge=1)
    """Number of array tasks (shards); required unless resuming."""
    resume: bool = False
    """Resubmit the shards of run_dir that did not complete, then aggregate."""
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    """The jobs' resources and behaviour (`+slurm.<name>=...`)."""


@dataclass(frozen=True)
class SubmitRequest:
    run_dir: Path
    num_shards: int | None
    resume: bool
    slurm: SlurmSettings
    forwarded: list[str]  # override strings for ng_run and ng_collect_rollouts, as the user wrote them


def parse_request(argv: list[str]) -> SubmitRequest:
    own = OmegaConf.create({})
    forwarded: list[str] = []
    for token in argv:
        ((key, value),) = parse_overrides([token])
        top = key.split(".")[0]
        if top in SubmitSettings.model_fields:
            OmegaConf.update(own, key, value, merge=True, force_add=True)
        elif top in _SET_BY_JOB_SCRIPT:
            raise ConfigError(f"+{key} is set by the job script for each task; leave it out")
        else:
            if is_secret_key(key):
                console.warn(f"+{key} is copied into the job scripts (which Slurm keeps); "
                             f"put secrets in env.yaml in the working directory instead")
            forwarded.append(token)
    own_settings = build(SubmitSettings, plain_dict(own), unknown="error")
    return SubmitRequest(
        run_dir=Path(own_settings.run_dir).resolve(),
        num_shards=own_settings.num_shards,
        resume=own_settings.resume,
        slurm=own_settings.slurm,
        forwarded=forwarded,
    )


def _safe_path(path: Path, what: str) -> str:
    if not _SAFE_PATH.match(str(path)):
        raise ConfigError(f"{what} {path} has characters a #SBATCH line cannot hold (use letters, digits, ._-+:@/)")
    return str(path)


def _bash_array(tokens: list[str]) -> str:
    return " ".join(shlex.quote(t) for t in tokens)


def _directives(slurm: SlurmSettings) -> str:
    options = [f"--{name}={getattr(slurm, name)}" for name in ("partition", "account", "time", "mem")
               if getattr(slurm, name) is not None]
    return "\n".join(f"#SBATCH {option}" for option in options + slurm.sbatch_args)


def render_scripts(
    request: SubmitRequest, layout: RunLayout, workdir: Path, aggregate_args: list[str]
) -> tuple[str, str]:
    """The collect and aggregate job scripts for this request; `aggregate_args` go to the aggregate job's ng_run."""
    slurm = request.slurm
    templates = Path(slurm.templates_dir) if slurm.templates_dir else DEFAULT_TEMPLATES_DIR
    job_name = slurm.job_name or layout.run_dir.name
    if not _SAFE_NAME.match(job_name):
        raise ConfigError(f"job name {job_name!r} must be letters, digits and ._+- (set +slurm.job_name=...)")
    bin_dir = Path(sys.executable).parent
    values = {
        "job_name": job_name,
        "run_dir": _safe_path(layout.run_dir, "run directory"),
        "workdir": _safe_path(workdir, "working directory"),
        "num_shards": str(layout.num_shards),
        "last_shard": str(layout.num_shards - 1),
        "array_throttle": f"%{slurm.max_parallel}" if slurm.max_parallel else "",
        "signal_lead_s": str(slurm.signal_lead_s),
        "deadline_lead_s": str(slurm.signal_lead_s + SLURM_SIGNAL_RESOLUTION_S + DRAIN_STOP_ALLOWANCE_S),
        "exit_deadline": str(EXIT_DEADLINE),
        "cpus_per_task": str(slurm.cpus_per_task),
        "aggregate_cpus_per_task": str(slurm.aggregate_cpus_per_task),
        "startup_timeout_s": str(slurm.startup_timeout_s),
        "sbatch_directives": _directives(slurm),
        "python": shlex.quote(sys.executable),
        "bin_dir": shlex.quote(str(bin_dir)),
        "ng_run_args": _bash_array(request.forwarded),
        "collect_args": _bash_array(request.forwarded),
        "aggregate_ng_run_args": _bash_array(aggregate_args),
        "common_functions": read_template(templates, COMMON_FUNCTIONS).strip(),
        # The run's file names come from the layout; the collect job's shard is the shell's ${SHARD}.
        "shard_log": str(layout.shard_log("%a")),
        "aggregate_log": str(layout.aggregate_log),
        "shard_output": str(layout.shard_output("${SHARD}")),
        "done_marker": str(layout.done_marker("${SHARD}")),
        "shard_outputs_glob": str(layout.shard_outputs_glob()),
        "merged_output": str(layout.merged_output),
        "summary": str(layout.summary),
    }
    return (
        render(read_template(templates, COLLECT_TEMPLATE), values),
        render(read_template(templates, AGGREGATE_TEMPLATE), values),
    )


def _check_config(request: SubmitRequest, workdir: Path) -> dict[str, ServerSpec]:
    """Fail now, not in every array task later, on a config ng_run or the collector would refuse; return its servers."""
    config = load_global_config(request.forwarded, cwd=workdir, require_complete=False)
    servers = config.servers()
    if not servers:
        raise ConfigError("the config defines no servers (pass +config_paths=[...])")
    input_path = config.get("input_jsonl_fpath")
    if not input_path:
        raise ConfigError("missing required option +input_jsonl_fpath=...")
    if not (workdir / str(input_path)).is_file():
        raise ConfigError(f"input file not found: {input_path}")
    return servers


def aggregate_ng_run_args(request: SubmitRequest, workdir: Path, collect_servers: dict[str, ServerSpec]) -> list[str]:
    """ng_run arguments for the aggregate job: the run's own, or `+slurm.aggregate_config_paths` plus the overrides
    that still fit (one for a server implementation those configs do not have would make ng_run refuse to start)."""
    paths = request.slurm.aggregate_config_paths
    if paths is None:
        return list(request.forwarded)
    config_paths = f"+config_paths=[{','.join(paths)}]"
    servers = load_global_config([config_paths], cwd=workdir, require_complete=False).servers()
    args = [config_paths]
    for token in request.forwarded:
        ((key, _),) = parse_overrides([token])
        name, *rest = key.split(".")
        if name == "config_paths":
            continue
        if name in collect_servers and len(rest) >= 2:
            spec = servers.get(name)
            if spec is None or (spec.kind, spec.implementation) != (rest[0], rest[1]):
                console.say(f"note: +{key} is not passed to the aggregate job (its config defines {name} "
                            f"differently)")
                continue
        args.append(token)
    return args


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise SlurmCommandError(f"{command[0]} not found: is this a SLURM login node?") from None
    if done.returncode != 0:
        raise SlurmCommandError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _sbatch(args: list[str], dry_run: bool) -> str:
    command = ["sbatch", "--parsable", *args]
    if dry_run:
        console.say(f"would run: {shlex.join(command)}")
        return "DRY-RUN"
    return _run(command).strip().split(";")[0]


def _active_jobs(job_ids: set[str]) -> dict[str, str]:
    """Queued or running jobs (array tasks included) of `job_ids`: their squeue id -> state."""
    active = {}
    for line in _run(["squeue", "-h", "-o", "%F %i %T"]).splitlines():
        array_id, job_id, state = line.split()
        if array_id in job_ids:
            active[job_id] = state
    return active


def _array_spec(shards: list[int], max_parallel: int | None) -> str:
    spec = ",".join(map(str, shards)) if shards != list(range(len(shards))) else f"0-{len(shards) - 1}"
    return spec + (f"%{max_parallel}" if max_parallel else "")


def _submit(layout: RunLayout, shards: list[int], record: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    """Submit the collect array for `shards` (none: only aggregation is left) and the aggregate job."""
    entry: dict[str, Any] = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "shards": shards}
    array = _array_spec(shards, record["max_parallel"])
    dependency_args = []
    if shards:
        entry["collect_job_id"] = _sbatch([f"--array={array}", str(layout.collect_script)], dry_run)
        dependency = f"--dependency={record['dependency']}:{entry['collect_job_id']}"
        dependency_args = [dependency, "--kill-on-invalid-dep=yes"]
    entry["aggregate_job_id"] = _sbatch([*dependency_args, str(layout.aggregate_script)], dry_run)
    verb = "would submit" if dry_run else "submitted"
    if shards:
        console.say(f"{verb} collect array {entry['collect_job_id']} (shards {array}) -> logs "
                    f"{layout.shard_log('<i>')}")
    console.say(f"{verb} aggregate job {entry['aggregate_job_id']} -> {layout.merged_output}, "
                f"log {layout.aggregate_log}")
    if not dry_run:
        record["submissions"].append(entry)
        layout.submission.write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2))
        console.say(follow_hint(layout, entry))
    return entry


def follow_hint(layout: RunLayout, entry: dict[str, Any]) -> str:
    """How to follow a submission: the queue (squeue names array task i `<array>_<i>`, as the logs do) and the logs."""
    jobs = ",".join(entry[key] for key in ("collect_job_id", "aggregate_job_id") if key in entry)
    lines = [f"follow it:   squeue -j {jobs}"]
    if "collect_job_id" in entry:
        array = entry["collect_job_id"]
        lines += [f"             tail -f {layout.shard_log('*')}",
                  f"a task's servers: {layout.logs_dir}/shard<i>/{array}_<i>-try<n>/ng_run.log and servers/"]
    lines += [f"the merge:   {layout.aggregate_log} (then {layout.merged_output}, {layout.aggregate_metrics})",
              f"if a task fails or is cancelled: ng_slurm_submit +run_dir={layout.run_dir} +resume=true"]
    return "\n".join(lines)


def submit_new(request: SubmitRequest) -> dict[str, Any]:
    if request.num_shards is None:
        raise ConfigError("missing required option +num_shards=<number of array tasks>")
    layout = RunLayout(request.run_dir, request.num_shards)
    if layout.submission.exists():
        raise SubmitError(f"{layout.run_dir} already holds a submitted run; continue it with "
                          f"ng_slurm_submit +run_dir={layout.run_dir} +resume=true, or choose a new +run_dir")
    workdir = Path.cwd().resolve()
    servers = _check_config(request, workdir)
    aggregate_args = aggregate_ng_run_args(request, workdir, servers)
    collect, aggregate = render_scripts(request, layout, workdir, aggregate_args)
    for folder in (layout.slurm_dir, layout.logs_dir, layout.rollouts_dir):
        folder.mkdir(parents=True, exist_ok=True)
    for path, text in ((layout.collect_script, collect), (layout.aggregate_script, aggregate)):
        path.write_text(text)
        path.chmod(0o700)  # they hold the command line; only the submitting user reads them
    console.say(f"job scripts: {layout.collect_script}, {layout.aggregate_script}")
    record: dict[str, Any] = {
        "num_shards": request.num_shards,
        "dependency": request.slurm.dependency,
        "max_parallel": request.slurm.max_parallel,
        "submissions": [],
    }
    return _submit(layout, list(range(request.num_shards)), record, request.slurm.dry_run)


def submit_resume(request: SubmitRequest) -> dict[str, Any] | None:
    """Resubmit the shards without a completion marker (and a fresh aggregate job), with the scripts already there."""
    only_dry_run = SlurmSettings(dry_run=request.slurm.dry_run)
    if request.forwarded or request.num_shards is not None or request.slurm != only_dry_run:
        raise ConfigError("+resume=true takes only +run_dir (and +slurm.dry_run): the run's scripts hold the rest")
    submission = submission_path(request.run_dir)
    if not submission.is_file():
        raise SubmitError(f"nothing to resume: {submission} does not exist")
    record = orjson.loads(submission.read_bytes())
    layout = RunLayout(request.run_dir, record["num_shards"])

    collect_ids = {s["collect_job_id"] for s in record["submissions"] if "collect_job_id" in s}
    aggregate_ids = {s["aggregate_job_id"] for s in record["submissions"]}
    active = _active_jobs(collect_ids | aggregate_ids)
    busy = {job: state for job, state in active.items() if job.split("_")[0] not in aggregate_ids}
    if busy:
        raise SubmitError(f"tasks of this run are still queued or running ({busy}); wait for them or scancel them "
                          f"first: two collectors must never write one shard")
    for job, state in active.items():
        if state != "PENDING":
            raise SubmitError(f"aggregate job {job} is {state}; wait for it or scancel it first")
        # A pending aggregate job waits on the old array; the new submission brings its own.
        if request.slurm.dry_run:
            console.say(f"would cancel pending aggregate job {job}")
        else:
            _run(["scancel", job])
            console.say(f"cancelled pending aggregate job {job}")

    shards = layout.incomplete_shards()
    console.say(f"incomplete shards: {shards or 'none'}")
    if not shards and layout.summary.is_file() and not orjson.loads(layout.summary.read_bytes()).get("problems"):
        console.say(f"the run is complete: {layout.merged_output}")
        return None
    return _submit(layout, shards, record, request.slurm.dry_run)


def main_args(argv: list[str]) -> int:
    request = parse_request(argv)
    if request.resume:
        submit_resume(request)
    else:
        submit_new(request)
    return 0


HELP = CommandHelp("ng_slurm_submit", __doc__, [
    ("Own options (the slurm.* ones shape the jobs)", SubmitSettings, ""),
    ("Forwarded to ng_run and ng_collect_rollouts on each task (with all of their options)", LoaderSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)


if __name__ == "__main__":
    main()

"""ng_status: list the servers the head server knows (ours or NeMo Gym 0.4.0's) and whether each answers; or, with
+output_jsonl_fpath, where a collection into that file stands (its <stem>_progress.json).

    ng_status +head_server.port=11000
    ng_status +output_jsonl_fpath=results/rollouts.jsonl

Exit status: 0 every server is healthy, 1 one is not (or no head server answers). Scripts wait for a stack started
with ng_run by polling this (or our head server's GET /status), never by reading ng_run's output. For a run: 0 while
it runs or once it finished with nothing failed; 1 when it stopped, was interrupted, finished with failures, or its
collector stopped updating the file (killed); 2 when there is no progress file.
"""

import time

from pydantic import Field

from nemo_gym import console
from nemo_gym.cli.common import CommandHelp, print_table, run_cli, load_config
from nemo_gym.exit_status import EXIT_DOWNSTREAM
from nemo_gym.compat.head_detect import NATIVE, HeadListing, detect_head

from nemo_gym.config.global_settings import LoaderSettings, head_server
from nemo_gym.config.typed import build
from nemo_gym.config.typed import Text
from nemo_gym.http_client import HttpClient, RequestFailed, get_json_blocking
from nemo_gym.rollout_collection.progress_file import progress_lines, progress_ok, read_progress
from nemo_gym.run_files.paths import RunPaths
from nemo_gym.server.client import fetch_status
from nemo_gym.sync_bridge import run_sync


class StatusSettings(LoaderSettings):
    health_timeout_s: float = Field(5.0, gt=0)
    """Seconds each of NeMo Gym's servers gets to answer its liveness probe (ours are probed by our head server)."""
    output_jsonl_fpath: Text | None = None
    """A collection's rollouts file: show where that run stands (its <stem>_progress.json) instead of the servers."""


async def _listing(head_url: str) -> HeadListing:
    http = HttpClient(connect_timeout_s=5.0, read_timeout_s=5.0)
    try:
        return await detect_head(http, head_url)
    finally:
        await http.aclose()


def _probe_liveness(servers: list[dict], timeout_s: float) -> list[dict]:
    """NeMo Gym's servers have no /health; each answers liveness at `/`."""
    rows = []
    for server in servers:
        try:
            reply = get_json_blocking(f"{server['url']}/", timeout_s=timeout_s)
            health = reply.get("status", "?") if isinstance(reply, dict) else "?"
        except RequestFailed as exc:
            health = "unreachable" if exc.status is None else "?"
        rows.append({**server, "health": health})
    return rows


def main_args(argv: list[str]) -> int:
    values = load_config(argv, require_complete=False).values
    settings = build(StatusSettings, values)
    if settings.output_jsonl_fpath is not None:
        snapshot = read_progress(RunPaths(settings.output_jsonl_fpath).progress)
        console.emit("\n".join(progress_lines(snapshot)))
        return 0 if progress_ok(snapshot, time.time()) else EXIT_DOWNSTREAM
    head_url = head_server(values).url
    listing = run_sync(_listing(head_url))  # a one-line error when there is no head server
    if listing.kind == NATIVE:
        status = fetch_status(head_url)  # our head server checks every server's /health itself
        rows, healthy = status["servers"], status["all_healthy"]
    else:
        rows = _probe_liveness(listing.servers, settings.health_timeout_s)
        healthy = all(row["health"] == "ok" for row in rows)
    print_table([_with_time(row) for row in rows], ["name", "kind", "implementation", "url", "health"])
    for row in rows:
        if row.get("last_log_line"):
            console.emit(f"{row['name']} last logged: {row['last_log_line']}")
    return 0 if healthy else EXIT_DOWNSTREAM


def _with_time(row: dict) -> dict:
    """`starting for 12 s` where the head server knows how long a server has been starting."""
    if row.get("starting_s") is None:
        return row
    return {**row, "health": f"{row['health']} for {row['starting_s']:.0f} s"}


HELP = CommandHelp("ng_status", __doc__, [("Options", StatusSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)

"""ng_status: list the servers the head server knows (ours or NeMo Gym 0.4.0's) and whether each answers."""

import asyncio

import httpx

from nemo_gym.cli.common import CommandHelp, print_table, run_cli
from nemo_gym.compat.head_detect import NATIVE, HeadListing, detect_head
from nemo_gym.config import load_global_config
from nemo_gym.config.global_settings import LoaderSettings
from nemo_gym.http_client import NO_RETRY, HttpClient
from nemo_gym.server.client import head_url_from_config

# NeMo Gym's servers answer liveness at `/`, ours at `/health`.
_HEALTH_PATH = {NATIVE: "/health"}


async def _listing(head_url: str) -> HeadListing:
    http = HttpClient(connect_timeout_s=5.0, read_timeout_s=5.0, retry=NO_RETRY)
    try:
        return await detect_head(http, head_url)
    finally:
        await http.aclose()


def main_args(argv: list[str]) -> int:
    head_url = head_url_from_config(load_global_config(argv, require_complete=False).values)
    listing = asyncio.run(_listing(head_url))  # a one-line error when there is no head server
    health_path = _HEALTH_PATH.get(listing.kind, "/")
    rows = []
    with httpx.Client(timeout=5.0, trust_env=False) as client:
        for server in listing.servers:
            try:
                status = client.get(f"{server['url']}{health_path}").json().get("status", "?")
            except (httpx.TransportError, ValueError):
                status = "unreachable"
            rows.append({**server, "health": status})
    print_table(rows, ["name", "kind", "implementation", "url", "health"])
    return 0 if all(r["health"] == "ok" for r in rows) else 1


HELP = CommandHelp("ng_status", __doc__, [("Options", LoaderSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)

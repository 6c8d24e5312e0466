"""ng_status: list the servers the head server knows and whether each answers /health."""

import httpx

from nemo_gym.cli.common import CommandHelp, print_table, run_cli
from nemo_gym.config import load_global_config
from nemo_gym.config.global_settings import LoaderSettings
from nemo_gym.errors import NemoGymError
from nemo_gym.server.client import head_url_from_config


def main_args(argv: list[str]) -> int:
    head_url = head_url_from_config(load_global_config(argv, require_complete=False).values)
    with httpx.Client(timeout=5.0, trust_env=False) as client:
        try:
            servers = client.get(f"{head_url}/servers").json()["servers"]
        except httpx.TransportError as exc:
            raise NemoGymError(f"no head server at {head_url} ({type(exc).__name__}); is `ng_run` running?") from None
        rows = []
        for server in servers:
            try:
                status = client.get(f"{server['url']}/health").json().get("status", "?")
            except (httpx.TransportError, ValueError):
                status = "unreachable"
            rows.append({**server, "health": status})
    print_table(rows, ["name", "kind", "implementation", "url", "health"])
    return 0 if all(r["health"] == "ok" for r in rows) else 1


HELP = CommandHelp("ng_status", __doc__, [("Options", LoaderSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)

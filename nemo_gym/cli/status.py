"""ng_status: list the servers the head server knows and whether each answers /health.

    ng_status +head_server.port=11000

Exit status: 0 every server is healthy, 1 one is not (or no head server answers). Scripts wait for a stack started
with ng_run by polling this (or the head server's GET /status), never by reading ng_run's output.
"""

from nemo_gym.cli.common import EXIT_DOWNSTREAM, print_table, run_cli
from nemo_gym.config import load_global_config
from nemo_gym.server.client import fetch_status, head_url_from_config


def main_args(argv: list[str]) -> int:
    head_url = head_url_from_config(load_global_config(argv, require_complete=False).values)
    status = fetch_status(head_url)
    print_table(status["servers"], ["name", "kind", "implementation", "url", "health"])
    return 0 if status["all_healthy"] else EXIT_DOWNSTREAM


def main() -> None:
    run_cli(main_args)

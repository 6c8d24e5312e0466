r"""ng_run: start the head server and every configured server, print where they are, stop them all on exit.

    ng_run "+config_paths=[nemo_gym/resources_servers/math/configs/math.yaml,configs/vllm_model.yaml]" \
        +policy_base_url=http://127.0.0.1:8000/v1

Exit status: 0 stopped by a signal, 1 a server failed to start or exited, 2 bad config. `ng_status` (or the head
server's GET /status) says when every server is healthy.
"""

import signal
import time
from pathlib import Path

from nemo_gym import console
from nemo_gym.cli.common import CommandHelp, print_table, run_cli, load_config
from nemo_gym.exit_status import EXIT_DOWNSTREAM
from nemo_gym.config.global_settings import RunSettings
from nemo_gym.config.shortcuts import ModelShortcuts
from nemo_gym.config.typed import build
from nemo_gym.errors import ConfigError
from nemo_gym.server.supervisor import Supervisor


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


def main_args(argv: list[str]) -> int:
    config = load_config(argv)
    settings = build(RunSettings, config.values)
    if not config.servers():
        raise ConfigError("the config defines no servers (pass +config_paths=[...])")
    log_dir = Path(settings.log_dir or Path("ng_logs") / time.strftime("%Y%m%d-%H%M%S"))
    supervisor = Supervisor(config, log_dir)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        supervisor.start()
        console.say(f"starting {len(supervisor.processes)} servers (logs in {log_dir}) ...")
        supervisor.wait_healthy()
        rows = [{"name": "head_server", "kind": "head", "implementation": "-", "url": supervisor.head_url}]
        rows += supervisor.listing()
        print_table(rows, ["name", "kind", "implementation", "url"])
        console.say("all servers healthy; Ctrl-C to stop")
        while (dead := supervisor.exited()) is None:
            time.sleep(0.5)
        assert dead.popen is not None, "exited() finds started processes only"
        console.error(f"{dead.label} exited with code {dead.popen.returncode}; log {dead.log_path}")
        return EXIT_DOWNSTREAM
    except _Stop as stop:
        console.say(f"received {stop}, stopping servers ...")
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        supervisor.stop()
        console.say("all servers stopped")


HELP = CommandHelp("ng_run", __doc__, [("Options", RunSettings, ""), ("Policy model shortcuts", ModelShortcuts, "")],
                   notes="Each server's settings (checked before any server starts): see docs/configuration.md.")


def main() -> None:
    run_cli(main_args, HELP)

"""ng_view: look at rollouts in a browser — overview, a filterable rollout table, task and transcript views, and
two runs compared task by task.

    ng_view +input_glob='results/run1*.jsonl' [+compare_glob='results/run2*.jsonl'] [+port=8080]
    ng_view +input_glob=results/run1.jsonl +export=report.html      # one self-contained HTML file, no server

The first open of a set of files builds an index in +index_dir (default ~/.cache/nemo_gym/viewer); later opens of
the same, unchanged files reuse it. The server binds 127.0.0.1 unless +host says otherwise.
"""

import sys
from dataclasses import dataclass
from pathlib import Path

from nemo_gym.cli.common import run_cli
from nemo_gym.config import load_global_config
from nemo_gym.rollout_collection.config import _FromGlobal
from nemo_gym.errors import ConfigError
from nemo_gym.server.supervisor import free_port
from nemo_gym.viewer.export import DEFAULT_SAMPLE, export_report
from nemo_gym.viewer.index import default_cache_root, open_run
from nemo_gym.viewer.views import Viewer

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True, kw_only=True)
class ViewConfig(_FromGlobal):
    input_glob: str
    compare_glob: str | None = None
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, printed at start
    export: str | None = None
    export_sample: int = DEFAULT_SAMPLE
    index_dir: str | None = None

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"+port must be within 0..65535, got {self.port}")
        if self.export_sample < 1:
            raise ConfigError(f"+export_sample must be at least 1, got {self.export_sample}")


def _say(message: str) -> None:
    print(f"ng_view: {message}", file=sys.stderr, flush=True)


def main_args(argv: list[str]) -> int:
    config = ViewConfig.from_global(load_global_config(argv, require_complete=False))
    cache = Path(config.index_dir) if config.index_dir else default_cache_root()
    runs = {"a": open_run(config.input_glob, "a", cache, _say)}
    if config.compare_glob:
        runs["b"] = open_run(config.compare_glob, "b", cache, _say)
    viewer = Viewer(runs)
    if config.export:
        path = export_report(viewer, Path(config.export), config.export_sample)
        _say(f"wrote {path}")
        return 0
    from nemo_gym.viewer.app import ViewerServer  # the server stack only when serving

    if config.host not in LOOPBACK:
        _say(f"warning: binding {config.host}: anyone who can reach this machine can read these rollouts")
    port = config.port or free_port()
    print(f"ng_view: serving http://{config.host}:{port}/ (Ctrl-C to stop)", flush=True)
    ViewerServer(viewer).serve(config.host, port)
    return 0


def main() -> None:
    run_cli(main_args)


if __name__ == "__main__":
    main()

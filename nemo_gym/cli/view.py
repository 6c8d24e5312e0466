"""ng_view: look at rollouts in a browser — overview, a filterable rollout table, task and transcript views, and
two runs compared task by task.

    ng_view +input_glob='results/run1*.jsonl' [+compare_glob='results/run2*.jsonl'] [+port=8080]
    ng_view +input_glob=results/run1.jsonl +export=report.html      # one self-contained HTML file, no server

The first open of a set of files builds an index in +index_dir (default ~/.cache/nemo_gym/viewer); later opens of
the same, unchanged files reuse it. The server binds 127.0.0.1 unless +host says otherwise.
"""

from pathlib import Path

from pydantic import Field

from nemo_gym import console
from nemo_gym.cli.common import CommandHelp, run_cli, load_config
from nemo_gym.config.typed import Text
from nemo_gym.loopback import is_loopback
from nemo_gym.rollout_collection.config import _FromGlobal
from nemo_gym.server.supervisor import free_port
from nemo_gym.viewer.export import DEFAULT_SAMPLE, export_report
from nemo_gym.viewer.index import default_cache_root, open_run
from nemo_gym.viewer.views import Viewer


class ViewConfig(_FromGlobal):
    input_glob: Text
    """Glob (or comma-separated globs) of the rollout files to show; their sidecars are found next to them."""
    compare_glob: Text | None = None
    """A second run to compare with, task by task."""
    host: Text = "127.0.0.1"
    """Address to bind; anything but loopback lets others on the network read the rollouts."""
    port: int = Field(0, ge=0, le=65535)
    """Port to serve on; 0 picks a free one and prints it."""
    export: Text | None = None
    """Write one self-contained HTML report to this path instead of serving."""
    export_sample: int = Field(DEFAULT_SAMPLE, ge=1)
    """Transcripts included in an exported report."""
    index_dir: Text | None = None
    """Where the row indexes are kept (default ~/.cache/nemo_gym/viewer)."""


def _indexing(message: str) -> None:
    console.progress(f"ng_view: {message}")


def main_args(argv: list[str]) -> int:
    config = ViewConfig.from_global(load_config(argv, require_complete=False))
    cache = Path(config.index_dir) if config.index_dir else default_cache_root()
    runs = {"a": open_run(config.input_glob, "a", cache, _indexing)}
    if config.compare_glob:
        runs["b"] = open_run(config.compare_glob, "b", cache, _indexing)
    viewer = Viewer(runs)
    if config.export:
        path = export_report(viewer, Path(config.export), config.export_sample)
        console.say(f"ng_view: wrote {path}")
        return 0
    from nemo_gym.viewer.app import ViewerServer  # the server stack only when serving

    if not is_loopback(config.host):
        console.warn(f"ng_view binds {config.host}: anyone who can reach this machine can read these rollouts")
    port = config.port or free_port()
    console.say(f"ng_view: serving http://{config.host}:{port}/ (Ctrl-C to stop)")
    ViewerServer(viewer).serve(config.host, port)
    return 0


HELP = CommandHelp("ng_view", __doc__, [("Options", ViewConfig, "")])


def main() -> None:
    run_cli(main_args, HELP)


if __name__ == "__main__":
    main()

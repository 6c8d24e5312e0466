"""A benchmark shaped like the vLLM ones, with a cheap child: `recording` + `child_process` start a server that, like
vLLM, does not die with its parent (Python's http.server), then the benchmark works until it is stopped."""

import subprocess
import sys
import time

from benchmarks.perf.lifecycle import child_process
from benchmarks.perf.results import recording

if __name__ == "__main__":
    with recording("child_server_benchmark") as recorder, \
            child_process([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
        time.sleep(600)
        recorder.write({}, {})

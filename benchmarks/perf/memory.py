"""Peak memory of the calling process, as benchmarks report it."""

from pathlib import Path


def peak_rss_mb() -> float:
    """VmHWM of this process in MB. Not `ru_maxrss`: that survives exec, so a child started by a large parent
    would report the parent's size."""
    status = Path("/proc/self/status").read_text()
    return round(int(status.split("VmHWM:")[1].split()[0]) / 1024, 1)

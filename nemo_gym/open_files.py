"""The process's limit on open files, raised by the processes that hold many sockets at once: every server when it
starts serving, and a rollout collection (ng_collect_rollouts, the trajectory collector) when it starts. At 1,024
rollouts in flight such a process holds more sockets than the usual soft limit (1,024) allows, and would fail with
EMFILE. Nothing else changes it: a trainer that only builds an HTTP client keeps the limit it set."""

import resource


def allow_open_files_up_to_hard_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if resource.RLIM_INFINITY not in (soft, hard) and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

"""The exit statuses of every command, one definition (nemo_gym.errors says which error family gets which)."""

EXIT_DOWNSTREAM = 1  # something the input did not cause failed; the same command may succeed later
EXIT_BAD_INPUT = 2  # fix the command: running it again as it is cannot help
EXIT_RETRY_LATER = 75  # sysexits' EX_TEMPFAIL: run the same command again once the service serves
# A collection drained before its deadline with progress made: resume it (the Slurm job script requeues its task).
EXIT_DEADLINE = 79
EXIT_INTERRUPTED = 130

"""Every way the experience layer can fail, as one typed hierarchy.

A trainer catches `ExperienceError` to handle them all, or a subclass to handle one; each carries what failed
(sample, turn, prompt group) so the failure is visible instead of being scored as a reward of 0.
"""

from nemo_gym.errors import ConfigError


class ExperienceError(Exception):
    """Base of every error raised by `nemo_gym.experience`."""


class CollectorConfigError(ExperienceError, ConfigError):
    """A master config the asynchronous collector cannot run with; the message names the key (`grpo.async_grpo...`).

    Also the package's `ConfigError`, so a caller that handles every bad setting the same way catches it too."""


class GenerationError(ExperienceError):
    """A generation backend could not produce an output (server down, bad reply, timeout)."""


class UnsupportedBackendError(ExperienceError):
    """The generation backend lacks what was asked of it (e.g. asynchronous generation)."""


class EnvironmentStepError(ExperienceError):
    """An environment's `step` raised, or returned something that does not fit the batch."""


class UnknownTaskError(ExperienceError):
    """A sample's `task_name` has no environment in `task_to_env`."""


class ChatTemplateError(ExperienceError):
    """The tokenizer's chat template cannot continue a conversation token-exactly (it is not append-only)."""


class TokenAlignmentError(ExperienceError):
    """Token ids reported by a server do not form one contiguous sequence (retokenization drift)."""


class SampleRolloutError(ExperienceError):
    """One sample's multi-turn rollout failed; `stage` is "generation" or "environment"."""

    def __init__(self, sample_index: int, stage: str, turn: int, cause: BaseException) -> None:
        super().__init__(f"sample {sample_index} failed in {stage} at turn {turn}: {type(cause).__name__}: {cause}")
        self.sample_index = sample_index
        self.stage = stage
        self.turn = turn
        self.__cause__ = cause


class PromptGroupError(ExperienceError):
    """A prompt group could not be completed: one of its generations failed and its siblings were cancelled."""

    def __init__(self, prompt_idx: int, traj_idx: int, cause: BaseException) -> None:
        super().__init__(
            f"prompt {prompt_idx}: generation {traj_idx} failed ({type(cause).__name__}: {cause}); "
            f"the rest of its group was cancelled"
        )
        self.prompt_idx = prompt_idx
        self.traj_idx = traj_idx
        self.__cause__ = cause


class GroupTimeoutError(ExperienceError):
    """A prompt group did not finish within `group_timeout_s` (a straggler); it was cancelled and may be retried."""

    def __init__(self, prompt_key: tuple[int, int], timeout_s: float) -> None:
        super().__init__(f"prompt group (epoch {prompt_key[0]}, idx {prompt_key[1]}) exceeded {timeout_s}s")
        self.prompt_key = prompt_key
        self.timeout_s = timeout_s


class CollectionStoppedError(ExperienceError):
    """Asynchronous collection stopped for good; a trainer waiting on the replay buffer gets one of the subclasses
    instead of waiting forever."""


class CollectorDiedError(CollectionStoppedError):
    """The collector stopped on a fatal failure: the generation engine failed too many groups in a row, the
    rollout manager raised something that is not an `ExperienceError`, or the collection loop itself crashed."""


class DataExhaustedError(CollectionStoppedError):
    """Every epoch of the dataloader has been generated and the buffer cannot fill the requested step.

    `untrained_prompts` names, as (epoch, idx), the groups of that final step, generated but never to be trained.
    """

    def __init__(self, message: str, *, untrained_prompts: tuple[tuple[int, int], ...] = ()) -> None:
        super().__init__(message)
        self.untrained_prompts = untrained_prompts


class CollectorShutdownError(CollectionStoppedError):
    """The collector was shut down while the trainer still wanted data."""


class CollectionTimeoutError(ExperienceError):
    """A trainer-side wait (a blocking sample, waiting for pending generations) ran past its timeout while the
    collector was still running; the message carries the buffer's state at that moment."""


class CollectorCheckpointError(ExperienceError):
    """A collector checkpoint cannot be written or read (unknown format, unreadable file, wrong time to load)."""


class WeightUpdateError(ExperienceError):
    """A weight update did not reach every replica (or the in-process model) of a generation backend.

    `failed` maps each replica that did not take `version` to why ("<failure class>: <detail>"); `updated` lists the
    replicas that did. The backend's `weight_version` was not advanced: it still says `served_version`.
    """

    def __init__(self, version: int, failed: dict[str, str], updated: list[str], served_version: int,
                 note: str = "") -> None:
        why = "; ".join(f"{replica} ({reason})" for replica, reason in failed.items())
        took = ", ".join(updated) if updated else "none"
        super().__init__(f"weight update to version {version} failed on {len(failed)} replica(s): {why}. "
                         f"Took version {version}: {took}. weight_version stays {served_version}"
                         + (f"; {note}" if note else ""))
        self.version = version
        self.failed = dict(failed)
        self.updated = list(updated)
        self.served_version = served_version


class ReplicaPausedError(WeightUpdateError):
    """A weight update that failed or was cancelled left replicas paused: their load had begun, and serving a
    half-loaded model is worse than serving nothing (their weight version is unchanged), or their /resume failed.

    `paused` maps each such replica to the step it stopped at; restart it, or push whole weights again where its
    transport allows. Every other replica of `failed` serves whole weights: its old ones, or the new ones where the
    failure came after the load (its reason says which).
    """

    def __init__(self, version: int, failed: dict[str, str], updated: list[str], served_version: int,
                 paused: dict[str, str]) -> None:
        where = ", ".join(f"{replica} at {step}" for replica, step in paused.items())
        super().__init__(version, failed, updated, served_version, note=f"left paused: {where}")
        self.paused = dict(paused)

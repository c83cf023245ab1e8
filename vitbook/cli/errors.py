"""What ends a command-line run, and how: each error the CLI turns into one line and an
exit code (:func:`vitbook.train.main`: 2 for a :class:`UsageError`, 1 for a
:class:`TrainingFailed`, 128 + the signal's number for a :class:`TrainingInterrupted`)."""

from __future__ import annotations

from vitbook.data import image_folders
from vitbook.data.download import DownloadError
from vitbook.training.checkpoint import CheckpointMismatchError
from vitbook.training.divergence import TrainingDiverged

__all__ = [
    "FAILURES",
    "ProcessGroupFailed",
    "TrainingFailed",
    "TrainingInterrupted",
    "UsageError",
]


class UsageError(ValueError):
    """Arguments that cannot work together; raised before any data is prepared (a
    ``--resume`` that is not the run's own: before anything is written)."""


class ProcessGroupFailed(RuntimeError):
    """Under torchrun: another process ended, or did not answer within ``--dist-timeout``."""


# Errors that end a run with one line (the run marked failed and the CLI exiting with 1); any
# other error is a bug, whose traceback is worth more than a line.
FAILURES = (
    TrainingDiverged,
    CheckpointMismatchError,
    image_folders.ImageDecodeError,
    DownloadError,
    OSError,
    ProcessGroupFailed,
)


class TrainingInterrupted(KeyboardInterrupt):
    """A stop (Ctrl-C, SIGTERM, SIGHUP) during a run, after its completed epochs were saved;
    ``exit_code`` is 128 + the signal's number."""

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


class TrainingFailed(RuntimeError):
    """An error stopped a run after its completed epochs were saved and it was marked
    ``failed``; the message says what happened and what was kept."""

"""The errors spotsafe raises. Each message says what is wrong and what to do about it.

Entry points run under ``exit_on_error``: a ``SpotsafeError`` ends them with its one-line message
on stderr and ``EXIT_USAGE``, never a traceback. A training script does the same with
``@spotsafe.exit_on_error()`` on its main function (or catches ``SpotsafeError`` itself).
"""

from __future__ import annotations

import contextlib
import sys

# EX_USAGE-like: the user's configuration is wrong, a retry will not help.
EXIT_USAGE = 2


class SpotsafeError(Exception):
    """Base of every error spotsafe raises on purpose."""


class ConfigError(SpotsafeError, ValueError):
    """A configuration value outside what spotsafe can honour."""


class InvalidURIError(SpotsafeError, ValueError):
    """A checkpoint URI that is not s3://bucket/prefix, gs://bucket/prefix or file:///path."""


class StorageError(SpotsafeError):
    """Object storage refused or failed an operation."""


class BucketNotFoundError(StorageError):
    """The bucket named in the URI does not exist."""


class StoragePermissionError(StorageError):
    """The credentials in use may not perform the operation on the bucket or prefix."""


class StorageUnreachableError(StorageError):
    """The storage endpoint did not answer after bounded retries."""


class ObjectMissingError(StorageError):
    """An object the caller expected does not exist."""


class ManifestFormatError(SpotsafeError):
    """A manifest was written by a newer spotsafe than this one; upgrade before resuming."""


class CorruptCheckpointError(SpotsafeError):
    """A committed checkpoint whose objects are missing, truncated or fail their checksum."""


class StateMismatchError(SpotsafeError):
    """A checkpoint's state does not fit the objects it is loaded into (e.g. another model)."""


class SupersededError(SpotsafeError):
    """A newer attempt of the same run has started; this writer may no longer commit or delete."""


class CheckpointSaveError(SpotsafeError):
    """A checkpoint save failed; nothing committed before it is affected."""


class StepCommittedError(CheckpointSaveError):
    """A save of a step that is already committed, with other content: committed checkpoints are
    never rewritten."""


class exit_on_error(contextlib.ContextDecorator):
    """End the program on a SpotsafeError with its one-line message and EXIT_USAGE.

    Use as ``with exit_on_error():`` or as a decorator. Other exceptions pass through as they are.
    """

    def __enter__(self) -> exit_on_error:
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, tb: object) -> None:
        if isinstance(error, SpotsafeError):
            # One line, even where a library's text inside the message spans several.
            print("error:", " ".join(str(error).split()), file=sys.stderr, flush=True)
            raise SystemExit(EXIT_USAGE) from None

"""The errors arvis raises when it refuses input: one hierarchy, every class a ``ValueError``.

Each message names what was refused (the file and the field, or the argument), the value, and what
is allowed, in one line, so that a command line can print it as is (``arvis …: error: <message>``,
exit code 2) and a Python caller can catch the whole family with ``except ArvisError`` — or, as
before this hierarchy existed, with ``except ValueError``.

::

    ArvisError (ValueError)
    ├── CheckpointError   a weights file or model folder that cannot be loaded as asked: missing or
    │                     unreadable, an unsafe pickle, an unknown layout, tensors that are missing,
    │                     unexpected, mis-shaped, not tensors or not floating point, a component of
    │                     the wrong class
    ├── ConfigError       a model configuration (config.json, pickled training args, safetensors
    │                     metadata, constructor arguments): an unknown key, a wrong type, a value out
    │                     of its declared bounds, or a value the tensor shapes in the file contradict
    ├── JobError          a sampling-job folder that is held by another running job, holds another
    │                     job, or holds files the job did not write
    └── StorageError      the file system refused a write (disk full, quota, read-only, file-size
                          limit, permissions); says what happened and how to continue
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

__all__ = ["ArvisError", "CheckpointError", "ConfigError", "JobError", "StorageError", "storage_errors"]


class ArvisError(ValueError):
    """Base class of every error arvis raises for input it refuses (a ``ValueError``)."""


class CheckpointError(ArvisError):
    """A weights file or model folder cannot be loaded as asked (see the module docstring)."""


class ConfigError(ArvisError):
    """A model configuration is invalid or contradicts the weights it comes with."""


class JobError(ArvisError):
    """A sampling-job folder cannot be used by this job."""


# What the errnos a write can meet mean to a user, in a few words.
_OS_ERROR_MEANING = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EFBIG: "the file-size limit was reached (ulimit -f)",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "an I/O error occurred",
    errno.ENOENT: "a folder on the way was removed",
}


class StorageError(ArvisError):
    """The file system refused a write; the message says why and how to continue."""

    @classmethod
    def from_os_error(cls, err: OSError, action: str, advice: str) -> StorageError:
        """``"{action} failed: {meaning} ({path}). {advice}"`` for an ``OSError`` met while writing.

        Args:
            err: the error the file system raised.
            action: what was being done, e.g. ``"writing image 000042.png"``.
            advice: how to continue, e.g. ``"free space and run the same command with --resume"``.
        """
        meaning = _OS_ERROR_MEANING.get(err.errno or -1, err.strerror or type(err).__name__)
        where = err.filename if err.filename is not None else ""
        detail = f"{meaning} ({os.fsdecode(where)})" if where else meaning
        return cls(f"{action} failed: {detail}. {advice}")


@contextlib.contextmanager
def storage_errors(action: str, advice: str) -> Iterator[None]:
    """Turn an ``OSError`` met while ``action`` (writing outputs) into a :class:`StorageError` saying what happened
    and ``advice``: how to continue."""
    try:
        yield
    except OSError as err:
        raise StorageError.from_os_error(err, action, advice) from err

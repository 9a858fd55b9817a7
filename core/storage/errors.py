"""The storage errors a user can act on: each names the file or server and what to do.

Below every other storage module, so that any of them can raise one (``Database`` translates driver
errors into these; ``migrations`` refuses a step with ``SchemaError``).
"""

from __future__ import annotations

from core.errors import MemoryStudioError


class StorageError(MemoryStudioError, RuntimeError):
    """Base class for storage problems a user can act on."""

    #: True when trying the same call again later may succeed (the server was restarting, say).
    retryable: bool = False


class StorageUnavailableError(StorageError):
    """The database server could not be reached or dropped the connection (a restart, a failover,
    a network fault), or ended the transaction to resolve a conflict. Nothing of the failed call was
    committed; trying again may succeed."""

    retryable = True


class DatabaseBusyError(StorageUnavailableError):
    """Another writer held the file's write lock for longer than the busy timeout (libSQL): nothing was
    written; trying again once it has finished may succeed."""


class DatabaseOpenError(StorageError):
    """The file exists but cannot be used as a memory database."""


class ReadOnlyError(StorageError):
    """A write was attempted on a database opened read-only."""


class SchemaError(StorageError):
    """The schema is missing, foreign, or newer than this version understands."""


class ReadOnlyFileError(ReadOnlyError):
    """The file, or the folder it sits in, cannot be written by this user."""


class FileChangedError(StorageError):
    """A file opened as a snapshot (its folder cannot be written) changed on disk after it was opened."""


class DiskFullError(StorageError):
    """A write failed because the disk (or the database's page limit) is full; it was rolled back."""


class CorruptDatabaseError(DatabaseOpenError):
    """A page of the file is damaged."""


class InvalidValueError(StorageError, ValueError):
    """The driver refused a value (for example text that cannot be encoded as UTF-8)."""


class UnreadableValueError(StorageError):
    """A stored value the driver cannot read (text that is not valid UTF-8 in a column read as text)."""

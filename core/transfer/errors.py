"""The errors of export and import (``core.transfer.format`` re-exports them)."""

from __future__ import annotations

from core.storage import StorageError


class TransferError(StorageError, ValueError):
    """Export or import could not be done; the message says why and what to do."""


class ExportFormatError(TransferError):
    """The file is not a Memory Studio export this version can read."""


class ExportWriteError(TransferError):
    """The export file could not be written (a folder on its path is a file, permission, the disk)."""


__all__ = ["ExportFormatError", "ExportWriteError", "TransferError"]

"""Export a thread or a resource (JSON, Markdown) and import an export into another database.

``export_thread`` / ``export_resource`` read (never write) and return the export document;
``dumps`` / ``to_markdown`` turn it into text; ``load`` checks a file; ``import_data`` writes it in
one transaction, ids kept, idempotent, conflicts reported. The format is described in ``format``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.lazy_names import lazy_names as _lazy_names

if TYPE_CHECKING:  # pragma: no cover
    from core.transfer.export import ExportOptions, export_data, export_resource, export_thread
    from core.transfer.errors import ExportFormatError, ExportWriteError, TransferError
    from core.transfer.format import (
        FORMAT,
        VERSION,
        dumps,
        load,
        loads,
        Streamed,
        render,
        render_chunks,
        shown_path,
        validate,
        write_atomically,
    )
    from core.transfer.importer import import_data, preview_import
    from core.transfer.markdown import to_markdown
    from core.transfer.recall import RecallIndexing, index_for_recall, recall_after_import, recall_in_use
    from core.transfer.report import Conflict, ImportReport

# Each name loads its module on first use (PEP 562): ``memory-studio``'s parser imports
# ``core.transfer.commands``, and with it this package, for every command.
_LAZY = {
    "Conflict": "core.transfer.report",
    "ExportFormatError": "core.transfer.errors",
    "ExportOptions": "core.transfer.export",
    "ExportWriteError": "core.transfer.errors",
    "FORMAT": "core.transfer.format",
    "ImportReport": "core.transfer.report",
    "RecallIndexing": "core.transfer.recall",
    "Streamed": "core.transfer.format",
    "TransferError": "core.transfer.errors",
    "VERSION": "core.transfer.format",
    "dumps": "core.transfer.format",
    "export_data": "core.transfer.export",
    "export_resource": "core.transfer.export",
    "export_thread": "core.transfer.export",
    "import_data": "core.transfer.importer",
    "index_for_recall": "core.transfer.recall",
    "load": "core.transfer.format",
    "loads": "core.transfer.format",
    "preview_import": "core.transfer.importer",
    "recall_after_import": "core.transfer.recall",
    "recall_in_use": "core.transfer.recall",
    "render": "core.transfer.format",
    "render_chunks": "core.transfer.format",
    "shown_path": "core.transfer.format",
    "to_markdown": "core.transfer.markdown",
    "validate": "core.transfer.format",
    "write_atomically": "core.transfer.format",
}

__all__ = [
    "FORMAT",
    "VERSION",
    "Conflict",
    "ExportFormatError",
    "ExportWriteError",
    "ExportOptions",
    "ImportReport",
    "RecallIndexing",
    "Streamed",
    "TransferError",
    "dumps",
    "export_data",
    "export_resource",
    "export_thread",
    "import_data",
    "index_for_recall",
    "load",
    "loads",
    "preview_import",
    "recall_after_import",
    "recall_in_use",
    "render",
    "render_chunks",
    "shown_path",
    "to_markdown",
    "validate",
    "write_atomically",
]

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals(), listed=__all__)

"""Export a thread or a resource (JSON, Markdown) and import an export into another database.

``export_thread`` / ``export_resource`` read (never write) and return the export document;
``dumps`` / ``to_markdown`` turn it into text; ``load`` checks a file; ``import_data`` writes it in
one transaction, ids kept, idempotent, conflicts reported. The format is described in ``format``.
"""

from __future__ import annotations

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

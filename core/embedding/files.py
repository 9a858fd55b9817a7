"""File helpers shared by model provisioning and the derived USE graphs: a streamed sha256 and an atomic
write (a temporary file beside the target, then ``os.replace``, so a reader never sees half a file)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CHUNK = 1 << 20  # bytes read at a time while hashing or copying a model file


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)

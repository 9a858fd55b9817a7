"""Load Qt for the desktop app with shiboken's signature module compiled from a cache.

``import PySide6`` starts shiboken's signature module (the helpers behind PySide's argument-error
messages, ``__signature__`` and ``__feature__``). Its Python sources are embedded in ``libshiboken``
as a zip archive, and shiboken's own importer compiles them with ``compile()`` at every start: about
45 ms of CPU on this project's reference machine, a tenth of the app's cold start to first paint.
``import_qt`` imports PySide6 with ``compile`` answering those sources (and only those: file names
under ``shibokensupport/``) from a marshal cache that holds each source with its code object, used
only when the source asked for is byte for byte the one stored, and stores what it had to compile.
Everything else ``compile`` is asked meanwhile goes to the real one, and the real one is back in
place before ``import_qt`` returns.

The cache is one file in the user's cache folder (``$XDG_CACHE_HOME/memory-studio`` on Linux), named
after the Python bytecode version. It is only an optimisation: a missing, unreadable, stale or
unwritable cache means the sources are compiled as usual, and a source that differs from the stored
one is compiled, so a changed PySide6 can never run old code.
"""

from __future__ import annotations

import builtins
import importlib.util
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

PREFIX = "shibokensupport/"  # the embedded archive's file names (shiboken's EmbeddableZipImporter)


def cache_dir() -> Path:
    """The user's cache folder for the app (what platformdirs would say, without its import cost)."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = str(Path.home() / "Library" / "Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memory-studio"


def cache_file() -> Path:
    """One file per bytecode version; each write keeps only what the running PySide6 used."""
    return cache_dir() / f"shiboken-signature-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


Entries = dict[str, tuple[bytes, CodeType]]  # file name -> (its source, the code compiled from it)


def _read(path: Path) -> Entries:
    try:
        with path.open("rb") as f:
            data = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, tuple) and len(v) == 2
            and isinstance(v[0], bytes) and isinstance(v[1], CodeType)}


def _write(path: Path, codes: Entries) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            marshal.dump(codes, f)
        os.replace(tmp, path)  # whole or not at all, even with two apps starting at once
    except OSError:  # no cache then: the next start compiles again
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def import_qt(path: Path | None = None) -> dict[str, int]:
    """Import PySide6's QtCore (and with it shiboken) using the compile cache at ``path`` (default:
    ``cache_file()``). Returns how many embedded sources came from the cache and how many were compiled
    (both 0 when PySide6 was already imported: nothing to do)."""
    if "shiboken6" in sys.modules:
        return {"cached": 0, "compiled": 0}
    path = path or cache_file()
    cached = _read(path)
    found: Entries = {}
    counts = {"cached": 0, "compiled": 0}
    real_compile = builtins.compile

    def compile_cached(source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
        if (mode != "exec" or args or kwargs or not isinstance(filename, str) or not filename.startswith(PREFIX)
                or not isinstance(source, (bytes, str))):
            return real_compile(source, filename, mode, *args, **kwargs)
        data = source if isinstance(source, bytes) else source.encode("utf-8")
        stored = cached.get(filename)
        if stored is not None and stored[0] == data:
            code = stored[1]
            counts["cached"] += 1
        else:
            code = real_compile(source, filename, mode)
            counts["compiled"] += 1
        found[filename] = (data, code)
        return code

    builtins.compile = compile_cached
    try:
        import PySide6.QtCore  # noqa: F401  (starts shiboken and its signature module)
    finally:
        builtins.compile = real_compile
    if counts["compiled"] and found:
        _write(path, found)  # only what this PySide6 uses: an old version's entries go
    return counts

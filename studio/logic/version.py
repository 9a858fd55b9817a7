"""Which Memory Studio this is, for Help > About (no Qt).

``core.version`` is the one place a release writes its version; until it exists (or in a source
checkout without it) the installed package's metadata answers.
"""

from __future__ import annotations

import importlib
from importlib import metadata

DISTRIBUTION = "memory-studio"


def app_version() -> str:
    try:
        return str(importlib.import_module("core.version").__version__)
    except (ImportError, AttributeError):
        pass
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown version (not installed)"

"""The root of every error the engine raises on purpose.

``except MemoryStudioError`` catches anything Memory Studio raised about a situation a user can act
on (a bad option, a thread of another resource, a locked trace file, a model that failed, a missing
embedding model...). Each subclass also keeps the built-in base that describes its kind
(``ValueError``, ``LookupError``, ``PermissionError``...), so ``except ValueError`` still works.
Built-in exceptions raised by the engine (``ValueError`` for a bad argument, ``TypeError``) are
programming errors, not situations, and do not sit under this root.
"""

from __future__ import annotations

__all__ = ["ConfigurationError", "MemoryStudioError", "OptionsError"]


class MemoryStudioError(Exception):
    """Base class of every error the Memory Studio engine raises; its message says what to do."""


class ConfigurationError(MemoryStudioError, ValueError):
    """A memory, an agent or a model was configured in a way that cannot work (an unknown model
    provider, a missing API key, a memory factory that returns something else); raised when it is
    built, never at the first turn."""


class OptionsError(MemoryStudioError, ValueError):
    """A memory option has an invalid value; the message says which and what is allowed."""

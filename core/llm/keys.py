"""Where API keys come from: the environment or the OS keyring, never the database.

A key is wrapped in ``Secret`` as soon as it is read so that an accidental ``repr``,
f-string, log line or trace attribute shows ``***`` instead of the key. Only the code that
builds the HTTP client calls ``reveal()``.

The OS keyring is optional (``pip install 'memory-studio[keyring]'``): it pulls in ``cryptography``
for what is the third place a key is looked for. Without it the lookup is skipped and says so in
``ResolvedKey.note``; asking for it by name (an explicit keyring user, or storing a key) raises
``KeyringMissingError`` with the install command.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from core.errors import MemoryStudioError

#: The keyring "service" under which Memory Studio stores provider keys.
DEFAULT_KEYRING_SERVICE = "memory-studio"
KEYRING_INSTALL = "pip install 'memory-studio[keyring]'"


class KeyringMissingError(MemoryStudioError, RuntimeError):
    """The OS keyring was asked for by name, but the optional ``keyring`` package is not installed."""


def _keyring() -> ModuleType | None:
    try:
        import keyring
        import keyring.errors  # noqa: F401 - the submodule resolve_api_key catches from
    except ImportError:
        return None
    return keyring


def keyring_available() -> bool:
    return _keyring() is not None


class Secret:
    """A string that refuses to print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True)
class ResolvedKey:
    """A key (or its absence) and a description of where it came from, safe to display.

    ``source`` is one of ``"explicit"``, ``"env:NAME"``, ``"keyring:SERVICE/USER"`` or
    ``"none"``; ``note`` explains a keyring that could not be read.
    """

    secret: Secret | None
    source: str
    note: str = ""


def resolve_api_key(
    *,
    explicit: str | Secret | None = None,
    env_var: str | None = "OPENAI_API_KEY",
    keyring_service: str | None = DEFAULT_KEYRING_SERVICE,
    keyring_username: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ResolvedKey:
    """Find an API key: explicit value, then ``env_var``, then the OS keyring.

    The keyring entry is looked up under ``keyring_service`` with ``keyring_username``
    (defaulting to ``env_var``, so one name identifies a key in both places). A keyring
    that is missing or locked is not an error here: local servers need no key, and a
    remote one will answer 401 with a hint that names both places to put it. Only an explicit
    ``keyring_username`` without the ``keyring`` package installed raises ``KeyringMissingError``:
    the caller asked for a keyring entry that cannot be read.
    """
    if explicit is not None:
        secret = explicit if isinstance(explicit, Secret) else Secret(explicit)
        if secret:
            return ResolvedKey(secret, "explicit")
    env = os.environ if environ is None else environ
    if env_var and env.get(env_var):
        return ResolvedKey(Secret(env[env_var]), f"env:{env_var}")
    username = keyring_username or env_var
    if keyring_service and username:
        keyring = _keyring()
        if keyring is None:
            if keyring_username:
                raise KeyringMissingError(
                    f"The API key is to come from the OS keyring (service {keyring_service!r}, user "
                    f"{keyring_username!r}), but the keyring package is not installed: run {KEYRING_INSTALL}"
                    + (f", or set the environment variable {env_var} instead." if env_var else ".")
                )
            return ResolvedKey(None, "none", note=f"keyring not installed ({KEYRING_INSTALL})")
        try:
            value = keyring.get_password(keyring_service, username)
        except keyring.errors.KeyringError as exc:
            return ResolvedKey(None, "none", note=f"keyring unavailable: {type(exc).__name__}")
        if value:
            return ResolvedKey(Secret(value), f"keyring:{keyring_service}/{username}")
    return ResolvedKey(None, "none")


def store_api_key(value: str, *, username: str, service: str = DEFAULT_KEYRING_SERVICE) -> None:
    """Save a key in the OS keyring (needs the optional ``keyring`` package)."""
    keyring = _keyring()
    if keyring is None:
        raise KeyringMissingError(
            f"Storing an API key in the OS keyring needs the keyring package: run {KEYRING_INSTALL}, "
            f"or set the environment variable {username} instead."
        )
    keyring.set_password(service, username, value)


def where_to_put_key(env_var: str | None, keyring_service: str | None,
                     keyring_username: str | None) -> str:
    """Human advice naming both places a key can live."""
    places = []
    if env_var:
        places.append(f"set the environment variable {env_var}")
    username = keyring_username or env_var
    if keyring_service and username:
        where = f"store it in the OS keyring (service {keyring_service!r}, user {username!r})"
        places.append(where if keyring_available() else f"{where} after {KEYRING_INSTALL}")
    return " or ".join(places) if places else "pass api_key explicitly"

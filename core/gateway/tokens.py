"""Tokens files: one API token per user or app, each reaching only the resources listed for it.

    {"tokens": [
      {"name": "alice-app", "sha256": "<64 hex digits>", "resources": ["alice"]},
      {"name": "support-desk", "sha256": "<64 hex digits>", "resources": ["alice", "bob"]},
      {"name": "admin", "sha256": "<64 hex digits>", "resources": ["*"]}
    ]}

The file holds each token's SHA-256, never the token: a copy of the file (a backup, a config
repository) lets nobody call the server. ``memory-studio tokens new --name N --resource R`` makes a
random token, prints it once and the entry to add (or adds it, ``--file``). ``"*"`` gives every
resource, as the shared ``--token`` does.

``load_tokens_file`` reads and checks a file when a server starts: each problem is an error naming
the entry (a hash that is not 64 hex digits, a token written where its hash belongs, no resources,
a repeated name or hash, an unknown key), or one other users can change; a file they can only read is a
warning (``warnings``).
``TokensFile.match`` finds the entry of a token a request sent, comparing hashes in constant time.
The file is read once, at start: restart the server after changing it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import MemoryStudioError
from core.ids import new_id_problem, shown
from core.scopes import DELEGATION_PREFIX, is_delegation_resource

#: A resources entry meaning every resource.
ALL_RESOURCES = "*"
#: What a new token starts with, so secret scanners and people can tell what it is.
TOKEN_PREFIX = "mst_"
_KEYS = frozenset({"name", "sha256", "resources"})
_MAX_NAME = 100


class TokensFileError(MemoryStudioError, ValueError):
    """A tokens file that cannot be used; the message names the file, the entry and what to fix."""


def token_sha256(token: str) -> str:
    """The hex SHA-256 of a token, as a tokens file holds it."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits), printable ASCII any HTTP client can send."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class TokenEntry:
    """One token of a tokens file: its ``name`` (shown in traces and logs as who called), the SHA-256 of
    the token, and the resources it may use (None: every resource, ``"*"`` in the file)."""

    name: str
    sha256: str
    resources: frozenset[str] | None

    def to_json(self) -> dict[str, Any]:
        listed = [ALL_RESOURCES] if self.resources is None else sorted(self.resources)
        return {"name": self.name, "sha256": self.sha256, "resources": listed}


@dataclass(frozen=True)
class TokensFile:
    """The checked entries of a tokens file, and the warnings found while reading it."""

    path: Path | None
    entries: tuple[TokenEntry, ...]
    warnings: tuple[str, ...] = field(default=())

    def match(self, token: str) -> TokenEntry | None:
        """The entry whose hash is the token's, or None. Every entry is compared, each in constant time, so
        how long a refusal takes says nothing about which hash came close."""
        digest = bytes.fromhex(token_sha256(token))
        found: TokenEntry | None = None
        for entry in self.entries:
            if hmac.compare_digest(digest, bytes.fromhex(entry.sha256)):
                found = entry
        return found


def load_tokens_file(path: str | os.PathLike[str]) -> TokensFile:
    """Read and check a tokens file; ``TokensFileError`` naming the entry when it cannot be used."""
    where = Path(path)
    entries = parse_entries(_read(where), where)
    if not entries:
        raise TokensFileError(f"The tokens file {where} holds no tokens, so no request could use it. Add one with "
                              f"`memory-studio tokens new --name NAME --resource ID --file {where}`.")
    return TokensFile(where, entries, tuple(_permission_warnings(where)))


def _read(where: Path) -> Any:
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TokensFileError(f"The tokens file {where} does not exist. Create it with `memory-studio tokens new "
                              f"--name NAME --resource ID --file {where}`, or fix the path.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TokensFileError(f"The tokens file {where} cannot be read ({exc}).") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise TokensFileError(f"The tokens file {where} is not valid JSON ({exc}).") from None


def parse_entries(data: Any, where: Path | str = "the tokens file") -> tuple[TokenEntry, ...]:
    """The entries of a tokens file's JSON document, checked (``TokensFileError`` naming the entry)."""
    if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
        raise TokensFileError(f'{where}: a tokens file is a JSON object {{"tokens": [...]}}, each entry '
                              '{"name": ..., "sha256": ..., "resources": [...]}.')
    if set(data) - {"tokens"}:
        raise TokensFileError(f"{where}: unknown key(s) {', '.join(sorted(map(repr, set(data) - {'tokens'})))} "
                              "beside 'tokens'; remove them.")
    entries: list[TokenEntry] = []
    names: dict[str, int] = {}
    hashes: dict[str, str] = {}
    for number, raw in enumerate(data["tokens"], start=1):
        entry = _entry(raw, f"{where}: entry {number}")
        label = f"{where}: entry {number} ({entry.name!r})"
        if entry.name in names:
            raise TokensFileError(f"{label}: the name is used by entry {names[entry.name]} too; names say who "
                                  "called in traces and logs, so each must be unique.")
        if entry.sha256 in hashes:
            raise TokensFileError(f"{label}: the same token hash as entry {hashes[entry.sha256]!r}; one token can "
                                  "have one entry only. Make a new token for one of them (`memory-studio tokens new`).")
        names[entry.name] = number
        hashes[entry.sha256] = entry.name
        entries.append(entry)
    return tuple(entries)


def _entry(raw: Any, label: str) -> TokenEntry:
    if not isinstance(raw, dict):
        raise TokensFileError(f'{label}: each entry is an object {{"name": ..., "sha256": ..., "resources": [...]}}.')
    unknown = set(raw) - _KEYS
    if unknown:
        raise TokensFileError(f"{label}: unknown key(s) {', '.join(sorted(shown(k) for k in unknown))}; an entry has "
                              "only 'name', 'sha256' and 'resources'.")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME or not name.isprintable():
        raise TokensFileError(f"{label}: 'name' must be printable text of 1 to {_MAX_NAME} characters (it says who "
                              f"called in traces and logs), got {shown(name)}.")
    label = f"{label} ({name!r})"
    digest = raw.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
        hint = ""
        if isinstance(digest, str) and digest.startswith(TOKEN_PREFIX):
            hint = (" It looks like the token itself: the file holds only its hash, so a copy of the file "
                    "calls nothing. Put the hash there (`memory-studio tokens hash` prints it) and keep the token "
                    "with its user only.")
        raise TokensFileError(f"{label}: 'sha256' must be the token's SHA-256, 64 hexadecimal digits "
                              f"(`memory-studio tokens new` prints it).{hint}")
    resources = raw.get("resources")
    if not isinstance(resources, list) or not resources:
        raise TokensFileError(f'{label}: \'resources\' must list the resources this token may use, for example '
                              '["alice"], or ["*"] for every resource. A token with none could do nothing.')
    allowed: set[str] = set()
    for resource in resources:
        if resource == ALL_RESOURCES:
            continue
        problem = new_id_problem(resource)
        if problem is None and is_delegation_resource(resource):
            problem = (f"ids starting with {DELEGATION_PREFIX!r} are the agents' delegations, which no token may "
                       "reach; list the user's own resource")
        if problem is not None:
            raise TokensFileError(f"{label}: the resource {shown(resource)} cannot be used ({problem}).")
        allowed.add(resource)
    if ALL_RESOURCES in resources and allowed:
        raise TokensFileError(f'{label}: "*" already means every resource; list it alone, or list the resources '
                              "without it.")
    return TokenEntry(name, digest.lower(), None if ALL_RESOURCES in resources else frozenset(allowed))


def _permission_warnings(where: Path) -> list[str]:
    if os.name != "posix":
        return []
    try:
        mode = where.stat().st_mode
    except OSError:
        return []
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        # (refused, not warned: whoever can change the file can give themselves a token to every resource)
        raise TokensFileError(
            f"The tokens file {where} can be changed by other users of this machine (mode {stat.S_IMODE(mode):04o}): "
            f"whoever can change it can give themselves a token to any resource. Run: chmod 600 {where} "
            "and start again.")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return [f"the tokens file {where} can be read by other users of this machine (mode "
                f"{stat.S_IMODE(mode):04o}); it holds only the tokens' hashes, but keep it yours. Run: chmod 600 {where}"]
    return []


def entry_for(name: str, resources: Sequence[str], token: str) -> TokenEntry:
    """The entry for a new ``token`` (checked as a file's entries are)."""
    (entry,) = parse_entries({"tokens": [{"name": name, "sha256": token_sha256(token), "resources": list(resources)}]},
                             "the new entry")
    return entry


def add_entry(path: str | os.PathLike[str], entry: TokenEntry) -> None:
    """Add ``entry`` to the tokens file at ``path`` (created, readable by its owner only, when missing).
    The file is checked first and written whole through a temporary file, so a refused entry changes
    nothing."""
    where = Path(path)
    existing = parse_entries(_read(where), where) if where.exists() else ()
    entries = [*existing, entry]
    parse_entries({"tokens": [e.to_json() for e in entries]}, where)  # a repeated name or hash is refused here
    _write(where, entries)


def _write(where: Path, entries: Iterable[TokenEntry]) -> None:
    text = json.dumps({"tokens": [e.to_json() for e in entries]}, indent=2) + "\n"
    temporary = where.with_name(f".{where.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        if where.exists():
            os.chmod(temporary, stat.S_IMODE(where.stat().st_mode))
        os.replace(temporary, where)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


__all__ = ["ALL_RESOURCES", "TOKEN_PREFIX", "TokenEntry", "TokensFile", "TokensFileError", "add_entry", "entry_for",
           "load_tokens_file", "new_token", "parse_entries", "token_sha256"]

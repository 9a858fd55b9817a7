"""A Postgres database location: the URL, and the form of it that may be shown or stored.

Passwords never leave this module: ``display`` and ``safe_url`` drop them, and the Studio keeps only
``safe_url`` in its recent list. libpq itself reads ``$PGPASSWORD`` and ``~/.pgpass``; a password kept
in the system keyring is looked up at connect time (``password_from_keyring``) and passed to the
driver, never written into a URL.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from core.storage.capabilities import POSTGRES, Capabilities
from core.storage.location import ResolvedPath

log = logging.getLogger(__name__)

SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")
KEYRING_SERVICE = "memory-studio-postgres"


# The keywords a libpq connection string ("host=db dbname=memory user=agent") starts with.
_CONNINFO = re.compile(r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options|"
                       r"application_name|connect_timeout|target_session_attrs)\s*=", re.IGNORECASE)


def is_postgres_url(target: object) -> bool:
    """A ``postgresql://`` URL, or a libpq ``key=value`` connection string (which ``PgLocation.parse``
    refuses with the URL to give instead: taken for a file name, it became a new SQLite file named
    after it, password included, in the working folder)."""
    return isinstance(target, str) and (target.strip().lower().startswith(SCHEMES) or bool(_CONNINFO.match(target)))


def _conninfo_refusal(conninfo: str) -> ValueError:
    """What to give instead of a connection string, as a URL without its password (never echoed)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        fields = {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
        port = fields.get("port", "")
        suggestion = make_url(host=fields.get("host") or fields.get("hostaddr") or "localhost",
                              port=int(port) if port.isdigit() else None,
                              database=fields.get("dbname") or "memory", user=fields.get("user") or "")
    except Exception:  # noqa: BLE001 - not parseable, or no psycopg: a generic example
        suggestion = "postgresql://user@host:5432/database"
    return ValueError(
        "--db / $MEMORY_STUDIO_DB holds a libpq connection string (key=value pairs); Memory Studio takes a "
        f"URL instead: {suggestion} . Keep the password out of it: PGPASSWORD, ~/.pgpass or the system "
        f"keyring (service {KEYRING_SERVICE!r}).")


def redact_url(url: str) -> str:
    """The URL without its password (and without a ``password=`` query parameter)."""
    parts = urlsplit(url.strip())
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{host}" if user else host
    query = "&".join(p for p in parts.query.split("&") if p and not p.lower().startswith("password="))
    scheme = "postgresql" if parts.scheme.startswith("postgres") else parts.scheme
    return urlunsplit((scheme, netloc, parts.path, query, parts.fragment))


def make_url(*, host: str, port: int | None, database: str, user: str) -> str:
    """A password-less URL from the fields of the Studio's Connect dialog."""
    auth = quote(user, safe="") + "@" if user else ""
    if host.startswith("/"):  # a Unix socket folder goes in the query, as libpq expects
        return f"postgresql://{auth}/{quote(database, safe='')}?host={quote(host, safe='/')}" + (
            f"&port={port}" if port else "")
    where = host or "localhost"
    if _is_ipv6(where):  # in brackets, or its colons are read as the port
        where = f"[{where}]"
    return f"postgresql://{auth}{where}{f':{port}' if port else ''}/{quote(database, safe='')}"


def url_fields(url: str) -> tuple[str, int | None, str, str]:
    """``make_url``'s fields back from a URL (host, port, database, user), so the Connect dialog shows
    what was tried last; never its password. A host or port given in the query (a socket folder) wins,
    as in libpq."""
    parts = urlsplit(url.strip())
    query = dict(parse_qsl(parts.query))
    host = query.get("host") or parts.hostname or ""
    try:
        port = int(query.get("port") or parts.port or 0) or None
    except ValueError:  # a port that is not a number: leave the dialog's default
        port = None
    return host, port, unquote(parts.path.lstrip("/")), unquote(parts.username or "")


def _is_ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False


@dataclass(frozen=True)
class PgLocation(ResolvedPath):
    """A ``ResolvedPath`` for a server database: no file, so no trace file beside it either."""

    url: str = field(default="", repr=False)  # may hold a password: never shown, logged or stored

    @classmethod
    def parse(cls, url: str, how: str) -> "PgLocation":
        url = url.strip()
        if not url.lower().startswith(SCHEMES):
            raise _conninfo_refusal(url)
        if url.lower().startswith("postgresql+psycopg://"):
            url = "postgresql://" + url[len("postgresql+psycopg://"):]
        why = "the URL was given explicitly (--db or open_store(url))" if how == "explicit" else "$MEMORY_STUDIO_DB is set"
        return cls(None, how, why, url=url)

    @property
    def display(self) -> str:
        return self.safe_url

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    @property
    def capabilities(self) -> Capabilities:
        return POSTGRES

    @property
    def observability_path(self) -> None:
        return None

    @property
    def is_postgres(self) -> bool:
        return True

    def keyring_key(self) -> str:
        parts = urlsplit(self.url)
        host = parts.hostname or dict(parse_qsl(parts.query)).get("host", "localhost")
        return f"{unquote(parts.username or '')}@{host}:{parts.port or 5432}/{parts.path.lstrip('/')}"

    def password_from_keyring(self) -> str | None:
        """The password kept for this server in the system keyring, if any (never logged)."""
        if urlsplit(self.url).password:
            return None  # the URL already carries one
        try:
            import keyring

            return keyring.get_password(KEYRING_SERVICE, self.keyring_key())
        except Exception as exc:  # no keyring backend on this machine: libpq's own sources still apply
            log.debug("no keyring password for %s (%s)", self.safe_url, type(exc).__name__)
            return None

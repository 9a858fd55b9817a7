"""What a database's owner is told to grant a role that may not use the memory: one home for the advice, naming
the schema the memory is in (the first of the session's ``search_path``, ``public`` by default), never ``public``
when it is another.

PostgreSQL 15+ no longer lets every role create in ``public`` (only the database's owner, through
``pg_database_owner``), and a schema other than ``public`` gives no role ``USAGE`` until granted: so a role that
did not create the memory needs ``USAGE`` on its schema (``public`` has it for every role unless revoked) and the
table and sequence grants; a role that makes the memory's tables (a first start, a later version's migrations)
needs ``CREATE`` on it too, or the command is run once by the owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from core.storage.pg.location import PgLocation


def quote_role(role: str) -> str:
    """A role's name in a statement (always quoted, as a role may be named like a keyword; a quote in it doubled,
    so a name holding quotes, semicolons or line breaks stays one name: the statement does only what it says)."""
    return '"' + role.replace('"', '""') + '"'


def role_sql(role: str) -> str:
    """``role`` (as ``role_of`` names it) in a statement the user is told to run: quoted, or ``<this role>``
    where the role is not known here (a statement that cannot run as pasted, rather than one naming another)."""
    return quote_role(role) if role != "this role" else "<this role>"


@dataclass(frozen=True)
class MemorySchema:
    """The schema the memory's tables are in (or are made in), and what the session's role may do there."""

    name: str
    sql: str  # its name as a statement writes it (the server's ``quote_ident``)
    usable: bool  # USAGE: its tables can be named at all
    role: str = ""  # the server's ``current_user`` on that connection: the role whose privileges are checked


def memory_schema(conn: psycopg.Connection[Any], first: str | None) -> MemorySchema:
    """Read on a fresh connection at open: ``first`` is the schema the ``search_path`` names first (None: it
    starts with ``"$user"`` or names none; then the schema the server picks, else ``public``). A schema the role
    has no ``USAGE`` on is skipped by the server (``current_schema()`` passes over it), so it is asked by name."""
    name = first
    if name is None:
        row = conn.execute("SELECT current_schema()").fetchone()
        name = str(row[0]) if row and row[0] else "public"
    row = conn.execute(
        "SELECT quote_ident(%s), has_schema_privilege(n.oid, 'USAGE'), current_user "
        "FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = %s", (name, name)).fetchone()
    assert row is not None
    # (USAGE unknown: not made yet, a read-only open of a search_path whose first schema is missing)
    return MemorySchema(name, str(row[0]), row[1] is None or bool(row[1]), str(row[2] or ""))


def role_of(location: PgLocation, schema: MemorySchema | None = None) -> str:
    """The role the advice names: the server's ``current_user`` read at open (``schema.role``), else the user the
    URL signs in as, as libpq reads it (a ``?user=`` in the query wins over the one before the ``@``: the URL's
    ``alice@`` alone named alice where mallory was refused, and a grant pasted from the advice went to alice)."""
    if schema is not None and schema.role:
        return schema.role
    try:
        user = str(conninfo_to_dict(location.url).get("user") or "")
    except psycopg.ProgrammingError:  # (not libpq's URL form: the part before the @, as written)
        user = unquote(urlsplit(location.url).username or "")
    return user or "this role"


def table_grants(schema: MemorySchema, role: str) -> str:
    """The statements that let ``role`` read and write the memory's tables in ``schema`` (made by another role)."""
    who = role_sql(role)
    usage = f"GRANT USAGE ON SCHEMA {schema.sql} TO {who}; "
    return (f"{usage}GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema.sql} TO {who}; "
            f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema.sql} TO {who};")


def unusable_schema(location: PgLocation, schema: MemorySchema) -> str:
    """Why a database whose memory schema the role may not use is refused at open (before the server's own
    "no schema has been selected to create in" and a driver traceback with the migration's SQL)."""
    role = role_of(location, schema)
    return (f"{location.display}: the memory's tables are in the schema {schema.name!r}, and the role {role!r} "
            f"may not use it (no USAGE privilege), so it can neither read nor write them. Ask the database's "
            f"owner to run: {table_grants(schema, role)}")


def may_not_create(location: PgLocation, schema: MemorySchema, first: str) -> str:
    """Why a role could not make the memory's tables in ``schema`` (``first``: the server's words)."""
    role = role_of(location, schema)
    who = role_sql(role)
    return (f"{location.display}: the role {role!r} may not create tables in the schema {schema.name!r} ({first}), "
            f"and the memory's tables are made there (at the first start, and by a newer version's migrations)"
            + ("; since PostgreSQL 15 only the database's owner may create in the schema public unless granted"
               if schema.name == "public" else "") + ". Run "
            f"this command once as the database's owner (who then grants this role the tables: "
            f"{table_grants(schema, role)}), or ask the owner to run: GRANT USAGE, CREATE ON SCHEMA {schema.sql} "
            f"TO {who};")

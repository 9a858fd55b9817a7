"""PostgreSQL as a second backend for the default storage domain.

Everything that differs from libSQL lives here: the URL and how it is shown, the connection pool,
the driver adaptation that lets the engine's SQL run unchanged (``adapt``), and the DDL of Mastra's
PgStore layout (``ddl``). Shared logic (``memory_store``, working memory, migrations) stays shared;
it asks the database for the few dialect-specific pieces (``core.storage.dialect``).
"""

from __future__ import annotations

from core.storage.pg.location import PgLocation, is_postgres_url, redact_url

__all__ = ["PgLocation", "is_postgres_url", "redact_url"]

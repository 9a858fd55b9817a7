"""Imported messages and semantic recall.

The keyword index finds new rows by itself (rowid watermark and triggers); vectors need the
embedder. ``recall_in_use`` tells whether this database's memory uses recall at all, so an import
into a database without it does not load a model for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.storage import Store, catalog

if TYPE_CHECKING:  # pragma: no cover
    from core.embedding import Embedder
    from core.messages import Message

_CHUNK = 500

def recall_in_use(store: Store) -> bool:
    """Whether this database's memory uses semantic recall: it has a vector table, or an agent that
    registered its configuration has recall on."""
    with store.db.read() as conn:
        tables = catalog.table_names(conn, "memory_messages")
    if any(t == "memory_messages" or t[len("memory_messages_"):][:1].isdigit() for t in tables):
        return True
    from core.agent_configs import list_agents

    for agent in list_agents(store):
        recall = agent.options.get("semantic_recall")
        if recall is True or (isinstance(recall, dict) and recall.get("enabled", True)):
            return True
    return False


@dataclass(frozen=True)
class RecallIndexing:
    indexed: int
    failed: int
    note: str


REINDEX_HINT = "'memory-studio reindex' does it"


def index_for_recall(store: Store, message_ids: list[str], embedder: "Embedder") -> RecallIndexing:
    """Embed imported messages into the recall index (the keyword index picks them up by itself)."""
    from core.recall import RecallIndex

    if not message_ids:
        return RecallIndexing(0, 0, "")
    index = RecallIndex.for_store(store, embedder)
    messages: list[Message] = []
    for start in range(0, len(message_ids), _CHUNK):
        messages.extend(store.memory.get_messages(message_ids[start:start + _CHUNK]))
    result = index.index_messages(index.unindexed(messages))
    failed = len(result.failed)
    note = f"indexed {len(result.indexed)} imported message{'s' if len(result.indexed) != 1 else ''} for recall"
    if failed:
        first = next(iter(result.failed.values()))
        note += f"; {failed} could not be embedded ({first}); {REINDEX_HINT}"
    return RecallIndexing(len(result.indexed), failed, note)


def recall_after_import(store: Store, message_ids: list[str], *, embed: bool = True,
                        embedder: "Embedder | None" = None) -> str:
    """Index imported messages for recall when this database uses it; one line saying what happened."""
    n = len(message_ids)
    if not embed:
        return f"the {n} imported messages are not embedded for semantic recall yet; {REINDEX_HINT}."
    if not recall_in_use(store):
        return (f"semantic recall is not used in this database; if you turn it on, "
                f"'memory-studio reindex' embeds the {n} imported messages.")
    if embedder is None:
        from core.embedding import EmbedderError
        from core.recall.models import store_embedder

        try:
            embedder = store_embedder(store, shared=False)  # the model the database's vectors come from
        except EmbedderError as exc:
            return (f"the {n} imported messages are not embedded for semantic recall yet ({exc}); "
                    f"{REINDEX_HINT} once the model is installed.")
    return index_for_recall(store, message_ids, embedder).note

"""Odd input from an MCP client, through the MCP SDK's client, on libSQL and Postgres (session 31's attack).

A NUL character in what a client stores:
Postgres stores no NUL (U+0000) in text: ``remember`` with such a title failed inside the database driver (the
client read "Error executing tool remember" and nothing more; the server's log psycopg's "PostgreSQL text fields
cannot contain NUL (0x00) bytes"), and ``update_working_memory`` with one as well, while libSQL kept both, so an export of them could not
be imported into Postgres. Both are refused on both backends now, saying what to do, and nothing is stored.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from mcp import Client  # noqa: E402

from core import Memory, MemoryOptions  # noqa: E402
from core.embedding.hashing import HashingEmbedder  # noqa: E402
from core.mcp_server.server import build_server  # noqa: E402
from core.mcp_server.tools import Binding, MemoryTools  # noqa: E402

pytestmark = pytest.mark.backends


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("scope", ["resource", "thread"])
def test_a_nul_character_in_a_title_or_working_memory_is_refused_saying_so(store, scope):
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": scope}), embedder=HashingEmbedder())
    tools = MemoryTools(memory, Binding("ada"))

    async def main() -> list[Any]:
        async with Client(build_server(tools)) as client:
            return [await client.call_tool("remember", {"text": "hi", "thread": "t1", "title": "Fo\x00od"}),
                    await client.call_tool("remember", {"text": "hi", "thread": "t2", "title": "Food"}),
                    await client.call_tool("update_working_memory", {"working_memory": "# Ada\n", "thread": "t2"}),
                    await client.call_tool("update_working_memory", {"working_memory": "# A\x00da\n", "thread": "t2"}),
                    await client.call_tool("remember", {"text": "a NUL \x00 in a message is kept", "thread": "t2"})]

    titled, stored, written, nul_wm, nul_text = anyio.run(main)
    assert titled.is_error and (
        "The title contains a NUL character (U+0000), which PostgreSQL stores in no text. Nothing was written."
        in _text(titled))
    assert "[SQL:" not in _text(titled) and "psycopg" not in _text(titled)
    assert memory.get_thread("t1") is None  # nothing stored: no thread, no message
    assert not stored.is_error and not written.is_error
    assert nul_wm.is_error and "The working memory holds a NUL character (U+0000" in _text(nul_wm)
    assert memory.get_working_memory(thread_id="t2", resource_id="ada") == "# Ada\n"
    assert not nul_text.is_error  # (message content is stored as JSON, where a NUL is the escape \u0000)
    assert memory.recall(thread_id="t2", resource_id="ada").messages[-1].text == "a NUL \x00 in a message is kept"


def test_a_number_out_of_range_is_repeated_at_most_80_characters(store):
    """top_k, last and page out of range came back whole in the tool error: an integer of 4,000 digits (JSON holds
    one; the SDK reads it) made a 4,000-character answer, where every other value a client sends is cut to 80."""
    tools = MemoryTools(Memory(store, MemoryOptions(), embedder=HashingEmbedder()), Binding("ada"))
    huge = int("7" * 4000)

    async def main() -> list[Any]:
        async with Client(build_server(tools)) as client:
            await client.call_tool("remember", {"text": "hi", "thread": "t1"})
            return [await client.call_tool("search_memory", {"query": "hi", "top_k": huge}),
                    await client.call_tool("read_thread", {"thread": "t1", "last": huge}),
                    await client.call_tool("read_thread", {"thread": "t1", "page": -huge})]

    for result, name in zip(anyio.run(main), ("top_k", "last", "page")):
        assert result.is_error and f"{name} must be between" in _text(result), _text(result)
        assert "7" * 79 + "…" in _text(result) and "7" * 81 not in _text(result) and len(_text(result)) < 400

"""Thread metadata holding a NUL character (U+0000), through the API: refused on both backends, naming the field.

Postgres keeps metadata as JSONB, which stores no NUL (psycopg's "unsupported Unicode escape sequence": a 500 behind
the gateway, the driver's words in the Studio); libSQL kept it, so that database could not be imported into Postgres.
Titles and working memory were refused so already (session 31); the text "\\u0000" (six characters) is no NUL.
"""

from __future__ import annotations

import pytest

from core import Memory, MemoryOptions
from core.storage import InvalidArgumentError

pytestmark = pytest.mark.backends


@pytest.mark.parametrize("metadata, where", [
    ({"note": "a\x00b"}, "at note"),
    ({"a": {"k\x00": 1}}, r"at the key 'k\\x00' of a"),
    ({"tags": ["x", {"y": ["\x00"]}]}, r"at tags\[1\]\.y\[0\]"),
])
def test_thread_metadata_holding_a_nul_is_refused_naming_where(store, metadata, where):
    memory = Memory(store, MemoryOptions())
    words = rf"The metadata of thread 't\d' holds a NUL character \(U\+0000\) {where}, .*Nothing was written\."
    with pytest.raises(InvalidArgumentError, match=words):
        memory.create_thread(thread_id="t1", resource_id="ada", metadata=metadata)
    assert memory.get_thread("t1") is None
    memory.create_thread(thread_id="t2", resource_id="ada", metadata={"kept": "yes"})
    with pytest.raises(InvalidArgumentError, match=words):
        memory.update_thread("t2", metadata=metadata)
    assert memory.get_thread("t2").metadata == {"kept": "yes"}
    # The six characters \u0000 are text, kept as written.
    memory.update_thread("t2", metadata={"note": "C strings end at \\u0000"})
    assert memory.get_thread("t2").metadata == {"kept": "yes", "note": "C strings end at \\u0000"}

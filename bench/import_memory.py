"""Write a large export file to measure what `memory-studio import` costs in memory.

One resource, one thread, messages of ~16 KB each (the shape 'memory-studio export' writes), about
MB megabytes × 1.33 in all. Measure an import of it with /usr/bin/time -v (docs/ARCHITECTURE.md, Figures):

    PYTHONPATH=. .venv/bin/python bench/import_memory.py .temp/big.json 760
    PYTHONPATH=. /usr/bin/time -v .venv/bin/python -m core.cli import --db .temp/big.db --no-index .temp/big.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from core import Memory, open_store
from core.messages import Message
from core.transfer import export_data, render


def main(out: Path, target_mb: int) -> None:
    db = out.with_suffix(".seed.db")
    db.unlink(missing_ok=True)
    with open_store(db) as store:
        Memory(store).create_thread(thread_id="t1", resource_id="ada")
        Memory(store).save_messages([Message.user("hello " * 1000, thread_id="t1", resource_id="ada")])
        doc = json.loads(render(export_data(store, resource_id="ada"), "json"))
    msg = doc["messages"][0]
    n = target_mb * 1_000_000 // (len(json.dumps(msg)) + 10)
    text = "word " * 1600  # ~8 KB, twice in the content (its parts and its text)
    rows = []
    for i in range(n):
        content = json.loads(msg["content"])
        content["parts"] = [{"type": "text", "text": f"{i} " + text}]
        content["content"] = f"{i} " + text
        rows.append(dict(msg, id=f"m{i:08d}", createdAt=f"2026-01-01T00:00:{i % 60:02d}.{i % 1000:03d}Z",
                         content=json.dumps(content, ensure_ascii=False)))
    write_export(out, doc, "messages", rows)


def write_export(out: Path, doc: dict[str, Any], key: str, rows: list[dict[str, Any]]) -> None:
    """``doc`` with ``rows`` as its ``key`` list (and count), written to ``out`` as 'memory-studio export' does."""
    doc[key] = rows
    doc.setdefault("counts", {})[key] = len(rows)
    out.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(out, out.stat().st_size, "bytes,", len(rows), key)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))

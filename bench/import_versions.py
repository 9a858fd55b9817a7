"""Write a large export file whose bulk is edit history (message versions), to measure what `memory-studio
import` holds of a version history (docs/ARCHITECTURE.md, Figures). One thread of 200 messages and about
MB megabytes of message versions (each ~16 KB: the stored row before and after the edit), listed by id with
createdAt out of id order, so the import has to sort them (oldest first) and cannot write them as listed:

    PYTHONPATH=. .venv/bin/python bench/import_versions.py .temp/versions.json 300
    PYTHONPATH=. /usr/bin/time -v .venv/bin/python -m core.cli import --db .temp/v.db --no-index .temp/versions.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.import_memory import write_export
from core import Memory, open_store
from core.messages import Message
from core.transfer import export_data, render

MESSAGES = 200


def main(out: Path, target_mb: int) -> None:
    db = out.with_suffix(".seed.db")
    db.unlink(missing_ok=True)
    with open_store(db) as store:
        memory = Memory(store)
        memory.create_thread(thread_id="t1", resource_id="ada")
        memory.save_messages([Message.user(f"hello {i}", thread_id="t1", resource_id="ada") for i in range(MESSAGES)])
        first = memory.recall(thread_id="t1", per_page=False).messages[0]
        memory.edit_message(first.id, resource_id="ada", text="hello again")
        doc = json.loads(render(export_data(store, resource_id="ada"), "json"))
    db.unlink(missing_ok=True)
    version = doc["messageVersions"][0]
    stored = json.loads(version["after_row"])
    ids = [m["id"] for m in doc["messages"]]
    text = "word " * 1600  # ~8 KB in each row (before and after)
    n = target_mb * 1_000_000 // (2 * len(text) + 1200)
    rows = []
    for i in range(n):
        rows_text = []
        for side in ("before", "after"):
            content = {"format": 2, "parts": [{"type": "text", "text": f"{side} {i} {text}"}]}
            rows_text.append(json.dumps(dict(stored, id=ids[i % MESSAGES], content=json.dumps(content)),
                                        separators=(",", ":")))
        seconds = (i * 7919) % max(n, 1)  # a permutation of 0..n-1 when n is not a multiple of 7919
        rows.append(dict(version, id=i + 1, message_id=ids[i % MESSAGES], before_row=rows_text[0],
                         after_row=rows_text[1],
                         createdAt=f"2026-01-01T{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
                                   f".{i % 1000:03d}Z"))
    write_export(out, doc, "messageVersions", rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))

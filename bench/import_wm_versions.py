"""Write an export file whose bulk is a working-memory history, to measure what `memory-studio import` holds of it
(docs/ARCHITECTURE.md, Figures). One resource whose working memory has COUNT versions of about KB kilobytes each,
listed by id with createdAt out of id order, so the import has to sort them (oldest first) and cannot write them as
listed; they sit inside the resource's ``workingMemory`` entry, as 'memory-studio export' writes them:

    PYTHONPATH=. .venv/bin/python bench/import_wm_versions.py /tmp/wm.json 20000 20
    PYTHONPATH=. /usr/bin/time -v .venv/bin/python -m core.cli import --db /tmp/wm.db --no-index /tmp/wm.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from core import Memory, open_store
from core.transfer import export_data, render


def main(out: Path, count: int, kb: int) -> None:
    db = out.with_suffix(".seed.db")
    db.unlink(missing_ok=True)
    with open_store(db) as store:
        memory = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        memory.create_thread(thread_id="t1", resource_id="ada")
        memory.update_working_memory(resource_id="ada", working_memory="# Ada\n- likes tea\n")
        doc = json.loads(render(export_data(store, resource_id="ada"), "json"))
    db.unlink(missing_ok=True)
    entry = next(e for e in doc["workingMemory"] if e["scope"] == "resource")
    template = entry["versions"][-1]
    line = "- a fact about the user, kept for later turns\n"
    body = line * max(1, kb * 1000 // len(line))
    versions = []
    for i in range(count):
        seconds = (i * 7919) % max(count, 1)  # a permutation of 0..count-1 when count is not a multiple of 7919
        versions.append(dict(template, id=i + 1, working_memory=f"# Ada, version {i}\n{body}",
                             createdAt=f"2026-01-01T{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:"
                                       f"{seconds % 60:02d}.{i % 1000:03d}Z"))
    entry["versions"] = versions
    doc.setdefault("counts", {})["workingMemoryVersions"] = count
    out.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(out, out.stat().st_size, "bytes,", count, "working-memory versions")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 20)

"""A question asked inside a thread that is itself about the question: what recall adds to the prompt
with and without the hybrid ranking's thread steps (the neighbours' share, the thread prior).

    .venv/bin/python bench/recall_asking_thread.py            # the default local model (USE)
    .venv/bin/python bench/recall_asking_thread.py --model e5

One resource, two threads: an introduction holding "I'm allergic to peanuts, badly." among unrelated
facts, and a 12-message dinner thread about recipes (satay sauce, pad thai with peanuts). Four wordings
of the same question (two that only the vectors can connect to the fact, two that name the allergy) are
asked from the dinner thread through ``Memory.assemble`` (resource scope, top 4, range 1, history 6),
once per setting of ``hybrid.NEIGHBOUR_SHARE`` / ``hybrid.THREAD_SHARE``. Each line says which threads
the four hits come from and whether the allergy fact reached the prompt.
The hand-made case of the ARCHITECTURE Known-problems row on the asking thread; LoCoMo's questions
asked from inside a thread are ``bench/recall_routes.py --only asked``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import Memory, MemoryOptions, Message, open_store  # noqa: E402
from core.embedding import default_embedder  # noqa: E402
from core.recall import hybrid  # noqa: E402

INTRO = [
    "Hi, I'm Ada, I live in Lisbon.", "Nice to meet you Ada!", "I'm allergic to peanuts, badly.",
    "Noted, no peanuts for you.", "My cat is called Pixel.", "Pixel is a lovely name.",
    "I work night shifts as a nurse.", "That sounds tiring.", "I booked a flight to Oslo for March 9.",
    "Have a great trip!",
]
DINNER = [
    "Can you suggest a dinner recipe for tonight?", "How about a Thai green curry with tofu?",
    "Sounds good, what else could I cook this week?", "A satay noodle stir-fry, a lentil soup, or pad thai.",
    "What goes into the satay sauce?", "Peanut butter, soy sauce, lime, garlic and chilli.",
    "And the pad thai?", "Rice noodles, egg, tamarind, fish sauce and crushed peanuts on top.",
    "The lentil soup?", "Red lentils, carrot, cumin, onion and stock.",
    "I also like spicy food.", "Then add extra chilli to any of them.",
]
QUESTIONS = [
    "Given my condition, which of these recipes is safe for me?",
    "Given my food intolerance, which of these recipes is safe for me?",
    "Given my allergy, which of these recipes is safe for me?",
    "Which of these dishes would be safe with what I'm allergic to?",
]
FACT = "I'm allergic to peanuts, badly."
T0 = datetime(2026, 11, 1, 9, tzinfo=timezone.utc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="use", help="use or e5 (a local model; nothing is downloaded)")
    args = ap.parse_args()
    embedder = default_embedder(args.model)
    settings = [("neither", 0.0, 0.0), ("neighbours' share", hybrid.NEIGHBOUR_SHARE, 0.0),
                ("share + thread prior", hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE)]
    print(f"model {embedder.model_id}; resource scope, top 4, range 1, history 6, asked from the dinner thread")
    folder = Path(tempfile.mkdtemp(prefix="recall-asking-"))
    try:
        for label, share, prior in settings:
            hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE = share, prior
            store = open_store(folder / f"{len(label)}-{share}-{prior}.db")
            memory = Memory(store, MemoryOptions(last_messages=6, semantic_recall={
                "top_k": 4, "message_range": 1, "scope": "resource"}), embedder=embedder)
            for thread, texts, start in (("intro", INTRO, 0), ("dinner", DINNER, 1000)):
                memory.create_thread(resource_id="ada", thread_id=thread)
                memory.save_messages([(Message.user if i % 2 == 0 else Message.assistant)(
                    text, thread_id=thread, resource_id="ada", created_at=T0 + timedelta(minutes=start + i))
                    for i, text in enumerate(texts)])
            for question in QUESTIONS:
                prompt = memory.assemble(thread_id="dinner", resource_id="ada", input=question, instructions="x")
                recalled = " ".join(f.text for f in prompt.fragments if f.source == "semantic-recall")
                hits = memory.search(question, resource_id="ada", top_k=4)
                threads = ", ".join(h.thread_id or "?" for h in hits)
                print(f"{label:<22} | {question[:52]:<52} | hits from {threads:<30} | fact in the prompt: "
                      f"{'yes' if FACT in recalled else 'no'}")
            store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

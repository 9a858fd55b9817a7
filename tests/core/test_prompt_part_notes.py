"""A fragment's notes of parts that are no text (an image, a file), told apart from text typed to look like them.

A fragment names each such part with a line (``core.prompt.part_note``: ``[image_url: data:image/png;base64,…
(118 characters)]``), and a user can type that same line: the text alone cannot tell them apart. The fragment carries
where its notes are (``Fragment.part_notes``), and what shows its text marks them: ``memory-studio prompt``, the
assembly record's JSON, the Studio (tests/studio/test_part_notes_shown.py). Nothing sent or compared changes.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from core import Agent, Memory, MemoryOptions, Message, open_store
from core.cli import main
from core.llm import ScriptedModel
from core.prompt import Fragment

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
URL = f"data:image/png;base64,{PNG}"
NOTE = f"[image_url: {URL[:80]}… ({len(URL)} characters)]"


def _thread_with_a_typed_note_and_an_image(path: Path) -> list[dict[str, object]]:
    """Thread t of ada: a user message whose text is the note an image gets, typed, followed by a real image; the
    messages the model was sent."""
    sent: list[dict[str, object]] = []

    def model(messages: list[dict[str, object]], tools: object) -> str:
        sent.extend(messages)
        return "A dot."

    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(last_messages=6, semantic_recall={"enabled": False}), name="m")
        Agent("a", instructions="Be brief.", model=ScriptedModel(model), memory=memory, tracer=False).generate(
            Message.create("user", [{"type": "text", "text": f"Look:\n{NOTE}"},
                                    {"type": "file", "data": PNG, "mimeType": "image/png"}]),
            memory={"resource": "ada", "thread": "t"})
    return sent


def test_a_fragment_says_which_of_its_lines_name_parts_and_sends_the_same(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    sent = _thread_with_a_typed_note_and_an_image(path)
    with open_store(path, read_only=True) as store:
        prompt = Memory(store, MemoryOptions(last_messages=6, semantic_recall={"enabled": False}),
                        name="m").assemble(thread_id="t", resource_id="ada", input="and now?")
    fragment = next(f for f in prompt.fragments if f.role == "user" and f.stored_ids)
    assert fragment.text == f"Look:\n{NOTE}\n{NOTE}"  # the text as it was: typed line, then the image's note
    assert [fragment.text[a:b] for a, b in fragment.part_notes] == [NOTE]
    assert fragment.part_notes == ((len(f"Look:\n{NOTE}\n"), len(fragment.text)),)
    assert json.loads(prompt.to_json())["fragments"][fragment.index]["partNotes"] == [list(fragment.part_notes[0])]
    # What the model is sent is untouched, and a fragment's notes take no part in comparing fragments.
    assert prompt.messages[fragment.message_indexes[0]] == next(m for m in sent if m["role"] == "user")
    assert Fragment(0, "user", "x", "s", "memory", part_notes=((0, 1),)) == Fragment(0, "user", "x", "s", "memory")


def test_memory_studio_prompt_marks_a_part_note_and_not_the_typed_line(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _thread_with_a_typed_note_and_an_image(path)
    out, err = io.StringIO(), io.StringIO()
    assert main(["prompt", "--db", str(path), "--resource", "ada", "--thread", "t", "and now?", "--no-recall"],
                out=out, err=err) == 0, err.getvalue()
    lines = out.getvalue().splitlines()
    assert f"   {NOTE}" in lines and f" + {NOTE}" in lines  # the typed line as text, the image's note marked
    assert lines.index(f"   {NOTE}") < lines.index(f" + {NOTE}")
    assert "Lines marked + name a part that is no text (an image, a file, audio): the model was sent the part " \
           "itself, and its tokens are not counted." in lines
    assert [line for line in lines if line.startswith(" + ")] == [f" + {NOTE}"]

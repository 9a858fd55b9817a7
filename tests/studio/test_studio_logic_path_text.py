"""The status bar's path in the room it has (``studio.logic.path_text``): one character is one unit here."""

from __future__ import annotations

import pytest

from studio.logic.path_text import cut_middle, least_room, shown_path, split_path

PATH = "/home/ada/Projects/agent/memory.db"


def test_a_path_that_fits_is_shown_whole_with_its_note() -> None:
    assert shown_path(PATH, "opened by path", 200, len) == f"{PATH} · opened by path"
    assert shown_path(PATH, "", len(PATH), len) == PATH


@pytest.mark.parametrize("room", range(len("…/memory.db"), len(PATH) + len(" · opened by path")))
def test_a_path_too_long_loses_the_middle_of_its_folders_never_its_file_name(room: int) -> None:
    shown = shown_path(PATH, "opened by path", room, len)
    assert len(shown) <= room
    assert shown.endswith("memory.db") or shown.endswith("memory.db · opened by path")
    assert "…" in shown
    head = shown[:shown.index("…")]
    assert PATH.startswith(head)  # (the start of the path, then its end)
    if room >= len("…/memory.db · opened by path"):
        assert shown.endswith(" · opened by path")  # the note goes only where the folders' "…" leaves no room


def test_a_room_narrower_than_the_file_name_still_shows_the_name() -> None:
    assert shown_path(PATH, "opened by path", 3, len) == "memory.db"  # (the label is never that narrow)
    assert least_room(PATH, len) == len("…memory.db")


def test_a_server_url_keeps_its_database_name_and_a_bare_name_stays_whole() -> None:
    url = "postgresql://memory_user@db.internal.example.com:5432/agent_memory"
    shown = shown_path(url, "opened by URL", 40, len)
    assert shown.endswith("/agent_memory · opened by URL") and len(shown) <= 40
    assert split_path("memory.db") == ("", "memory.db")
    assert split_path("C:\\Users\\ada\\memory.db") == ("C:\\Users\\ada\\", "memory.db")
    assert shown_path("memory.db", "opened by path", 12, len) == "memory.db"


def test_cut_middle_keeps_both_ends() -> None:
    assert cut_middle("abcdefghij", 10, len) == "abcdefghij"
    assert cut_middle("abcdefghij", 5, len) == "ab…ij"
    assert cut_middle("abcdefghij", 0, len) == ""

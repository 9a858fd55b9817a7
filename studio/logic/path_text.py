"""A database's path (or server URL) drawn in the room a label has (no Qt): cut in the middle of its folders, never
in its file name.

The status bar named the open file twice ("Opened /home/…/memory.db" on the left, the path again on the right) and at
a 1,100 px window cut both at their ends, the file name first. The path is said once, on the right; where it does not
fit, its folders lose their middle ("/home/ada/Pro…ning/memory.db · opened by path"), then the note after it goes,
and the file name (a server database's name) stays whole. The label's text and tooltip stay the whole path.
"""

from __future__ import annotations

from typing import Callable

ELLIPSIS = "…"


def split_path(path: str) -> tuple[str, str]:
    """``path``'s folders (up to and with its last separator) and its file name: the name is what is never cut."""
    cut = max(path.rfind("/"), path.rfind("\\")) + 1
    if cut <= 0 or cut == len(path):
        return "", path
    return path[:cut], path[cut:]


def cut_middle(text: str, room: int, advance: Callable[[str], int]) -> str:
    """``text`` with as few characters from its middle replaced by "…" as ``room`` needs ("" where not even
    "…" fits)."""
    if advance(text) <= room:
        return text
    if advance(ELLIPSIS) > room:
        return ""
    keep = len(text) - 1
    while keep > 0:
        head = (keep + 1) // 2
        shown = text[:head] + ELLIPSIS + text[len(text) - (keep - head):]
        if advance(shown) <= room:
            return shown
        keep -= 1
    return ELLIPSIS


def shown_path(path: str, note: str, room: int, advance: Callable[[str], int]) -> str:
    """What ``room`` px show of "``path`` · ``note``": the whole where it fits, else the folders cut in the middle
    (at least "…" of them kept), else the path so cut without the note, else the file name alone (a label as narrow
    as ``least_room`` cuts it no further)."""
    whole = f"{path} · {note}" if note else path
    if advance(whole) <= room:
        return whole
    folders, name = split_path(path)
    for tail in ((f"{name} · {note}",) if note else ()) + (name,):
        if not folders:
            if advance(tail) <= room:
                return tail
            continue
        head = cut_middle(folders, room - advance(tail), advance)
        if head:
            return head + tail
    return name


def least_room(path: str, advance: Callable[[str], int]) -> int:
    """The least width that shows ``path``'s file name whole (after "…" where it has folders)."""
    folders, name = split_path(path)
    return advance((ELLIPSIS if folders else "") + name)


__all__ = ["cut_middle", "least_room", "shown_path", "split_path"]

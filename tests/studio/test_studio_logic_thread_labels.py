"""How the thread tree names a thread (``studio.logic.thread_labels``; no Qt)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from studio.logic.dates import format_datetime
from studio.logic.thread_labels import repeated_titles, shared_id_prefix, thread_label, untitled_starts

UUID = "0195f3c2-7a1b-7c3d-8e4f-a1b2c3d4e5f6"


def test_a_title_of_its_own_is_shown_alone_and_an_alike_or_missing_one_gets_the_short_id() -> None:
    titles = ["Trip, day 1", "Trip, day 2", "Weekly sync", "weekly   Sync ", None, ""]
    repeated = repeated_titles(titles)
    assert repeated == frozenset({"weekly sync", ""})
    assert thread_label("Trip, day 1", "t-1", repeated) == "Trip, day 1"
    assert thread_label("Weekly sync", UUID, repeated) == "Weekly sync · …c3d4e5f6"  # a UUID by its tail
    assert thread_label("weekly   Sync ", "t-sync", repeated) == "weekly   Sync  · t-sync"
    assert thread_label(None, "t-none", frozenset()) == "(untitled) · t-none"  # untitled: always the id
    assert thread_label("  ", "t-blank", frozenset()) == "(untitled) · t-blank"


def test_ids_that_share_a_head_are_told_apart_by_what_follows_it() -> None:
    """A resource's thread ids often share a head ("customer-029-6ea9ab1b-t2", "…-t5"): shown by their
    first ten characters they all read "customer-0…", so three "Standup" threads were three identical rows.
    The shared head, up to its last separator, is left out."""
    ids = [f"customer-029-6ea9ab1b-t{n}" for n in (2, 5, 11)]
    prefix = shared_id_prefix(ids)
    assert prefix == "customer-029-6ea9ab1b-"
    labels = [thread_label("Standup", i, frozenset({"standup"}), prefix) for i in ids]
    assert labels == ["Standup · …t2", "Standup · …t5", "Standup · …t11"]
    assert thread_label(None, ids[0], frozenset(), prefix) == "(untitled) · …t2"
    assert shared_id_prefix(["t1", "t10"]) == ""  # no separator: nothing is left out ("t1" would be empty)
    assert shared_id_prefix(["a-1", "a-1-x"]) == "a-"  # never a whole id
    assert shared_id_prefix(["only-one"]) == ""
    assert shared_id_prefix([UUID, "0195f3c2-7a1b-7c3d-8e4f-000000000000"]) == "0195f3c2-7a1b-7c3d-8e4f-"


def test_a_delegations_resource_reads_as_who_delegated_to_whom() -> None:
    """A delegation's resource (``delegation:alice:helper``) stood in the tree as a resource of its own
    beside ``alice``, unexplained; it reads "alice → helper (delegation)", nested ones their whole chain."""
    from core.scopes import delegation_resource
    from studio.logic.thread_labels import delegation_note, resource_label

    alices = delegation_resource("alice", "helper")
    assert resource_label(alices) == "alice → helper (delegation)"
    assert resource_label(delegation_resource(alices, "checker")) == "alice → helper → checker (delegation)"
    assert resource_label(delegation_resource("a:b%c", "x:y")) == "a:b%c → x:y (delegation)"
    assert resource_label(delegation_resource(None, "helper")) == "(no resource) → helper (delegation)"
    # Any other id as it is: a user's, the older naming (which may be a user's own id), a malformed one.
    for other in ("alice", "alice-helper", "delegation:ali%63e:helper", "delegation:a:b:c", "delegation:"):
        assert resource_label(other) == other and delegation_note(other) is None
    note = delegation_note(alices)
    assert note is not None and "'helper'" in note and "alice" in note and "Forgetting alice" in note


def _width(text: str) -> int:
    """A stand-in for a font's advance: 7 px a character, the ellipsis and the arrow as wide as in the
    Studio's font ("…" 13 px, " → " 19 px)."""
    return 7 * len(text.replace(" → ", "").replace("…", "")) + 19 * text.count(" → ") + 13 * text.count("…")


def test_a_delegation_label_fitted_to_a_narrow_place_keeps_who_delegated_and_to_whom() -> None:
    """The tree cut a delegation's label in the middle like any title: "ada → he…egation)" in a 1,100 px
    window, the agent's name gone. Fitted, the least telling part goes first: a nested chain's middle, the
    middle of the delegating resource's id, then the mark, and the agent's name last."""
    from core.scopes import delegation_resource
    from studio.logic.thread_labels import fit_resource_label, resource_label

    ada = delegation_resource("ada", "helper")
    long_root = delegation_resource("customer-0291-northwind-traders", "research-assistant")
    nested = delegation_resource(long_root, "fact-checker")

    def fit(resource_id: str, width: int) -> str:
        text = fit_resource_label(resource_id, width, _width)
        assert _width(text) <= width, text  # (it fits: the view has nothing left to cut)
        return text

    assert fit(ada, 500) == resource_label(ada) == "ada → helper (delegation)"
    assert fit(ada, 150) == "ada → helper (deleg.)"
    assert fit(ada, 122) == "ada → helper"  # (the row is in italics: still a delegation on screen)
    assert fit(nested, 500) == "customer-0291-northwind-traders → … → fact-checker (delegation)"
    assert fit(nested, 400) == "customer-029…ind-traders → … → fact-checker (delegation)"
    assert fit(long_root, 300) == "cust…ers → research-assistant (delegation)"
    assert fit(long_root, 260) == "cus…rs → research-assistant (deleg.)"
    assert fit(long_root, 200) == "cus…ers → research-assistant"
    assert fit(long_root, 122) == "cu…rs → rese…ant"
    assert fit(nested, 122) == "cu…rs → fact…ker"  # (the chain's "…" goes last)
    assert fit_resource_label("alice-helper", 40, _width) == "alice-helper"  # another resource: the view cuts it


def test_a_resource_mastra_wrote_for_a_delegation_is_labelled_only_with_proof() -> None:
    """Mastra names a sub-agent's resource ``<resource>-<agent>``, which a user's own id can equal: it is
    labelled a delegation only when the data proves it (``known``: what the stored tool results prove), and
    its tooltip says why; its shape alone proves nothing."""
    from core.scopes import delegation_resource
    from studio.logic.thread_labels import (
        delegation_note,
        header_tip,
        header_title,
        is_delegation,
        resource_label,
        resource_tip,
    )

    known = {"user-42-researcher": ("user-42", "researcher")}
    assert resource_label("user-42-researcher") == "user-42-researcher" and not is_delegation("user-42-researcher")
    assert resource_label("user-42-researcher", known) == "user-42 → researcher (delegation)"
    assert is_delegation("user-42-researcher", known) and resource_label("alice-helper", known) == "alice-helper"
    note = delegation_note("user-42-researcher", known)
    assert note is not None and "Mastra" in note and "agent-researcher" in note
    nested = delegation_resource("user-42-researcher", "checker")  # (ours, of Mastra's)
    assert resource_label(nested, known) == "user-42 → researcher → checker (delegation)"
    # pane headers: the same label, the stored id on hover
    assert resource_tip("user-42-researcher", known) == "resource id: user-42-researcher"
    assert resource_tip("alice-helper", known) == "" and header_tip("x", "alice-helper", known) == ""
    assert header_tip("resource ada → helper (delegation)", delegation_resource("ada", "helper")) == (
        "resource ada → helper (delegation)\nresource id: delegation:ada:helper")
    assert header_title(None, "th-sub-1", "user-42-researcher", known) == "user-42 → researcher (delegation)"
    assert header_title("Sources", "th-sub-1", "user-42-researcher", known) == "Sources"
    assert header_title(None, "t-ah", "alice-helper", known) == "t-ah"


def test_a_titles_bidirectional_controls_and_line_breaks_are_shown_not_obeyed() -> None:
    # Found by the session-31 walk: a title starting with U+202E (right-to-left override) was drawn reversed,
    # "\u202eevil title" as "eltit live", in the tree, its tooltip and the panes' headers: not what is stored.
    from studio.logic.thread_labels import header_title, shown_title

    assert shown_title("\u202eevil title\u202c ok") == "\\u202eevil title\\u202c ok"
    assert shown_title("a\u2066b\u2069c") == "a\\u2066b\\u2069c"  # isolates too
    assert shown_title("first line\nsecond\tx\x1b[2J") == "first line\\nsecond\\tx\\x1b[2J"
    for unchanged in ("Weekly sync 2026-03-02", "👩\u200d💻 pair session", "שלום עולם", "مرحبا", "\u200fmark"):
        assert shown_title(unchanged) == unchanged  # joiners, right-to-left scripts and marks are drawn as stored
    assert thread_label("\u202eevil", "t1", frozenset()) == "\\u202eevil"
    assert thread_label("\u202eevil", "t1", frozenset({"\u202eevil"})) == "\\u202eevil · t1"
    assert header_title("\u202eevil", "t1", "ada") == "\\u202eevil"


def test_ids_and_names_shown_as_labels_are_escaped_too() -> None:
    # Any program writing the database can put a bidi control in an id: where the Studio shows one as a label
    # (a resource's row and headers, an untitled thread's short id, a delegation's names) it is written out.
    from studio.logic.thread_labels import delegation_note, header_title, resource_label, resource_tip
    from studio.logic.observations_layout import chunk_source

    assert resource_label("\u202eada") == "\\u202eada"
    assert resource_tip("\u202eada") == ""  # the label is the id, as shown
    assert resource_label("delegation:\u202eada:help\ner") == "\\u202eada → help\\ner (delegation)"
    assert resource_tip("delegation:\u202eada:helper") == "resource id: delegation:\\u202eada:helper"
    assert "\u202e" not in (delegation_note("delegation:\u202eada:helper") or "x\u202e")
    assert thread_label(None, "t\u202e1", frozenset()) == "(untitled) · t\\u202e1"
    assert header_title(None, "t\u202e1", "ada") == "t\\u202e1"
    assert chunk_source('<thread id="t\u202e1">\n* x\n</thread>', {"t\u202e1": "a\u2067b"}) == \
        "thread t\\u202e1 (a\\u2067b)"


def test_untitled_threads_are_named_by_when_they_started_to_the_minute_or_second_else_by_id() -> None:
    """Untitled threads with program-made ids ("thread_3fa2b1c4d5e6f7a8", as ``memory-studio serve`` makes them) read
    "(untitled) · …3fa2b1c4d5…": told apart, but alike to a user (found by s35-walk11). When each started names
    it: to the minute, to the second where two started in one minute, by its id where two started in one second."""
    t0 = datetime(2026, 12, 7, 9, 15, 42, tzinfo=timezone.utc)
    threads = [("a", None, t0), ("b", "", t0 + timedelta(hours=2)), ("c", "  ", t0 + timedelta(hours=2, seconds=5)),
               ("d", None, t0 + timedelta(days=1)), ("e", None, t0 + timedelta(days=1, microseconds=3)),
               ("f", "Titled", t0 + timedelta(days=3)), ("g", None, None)]
    starts = untitled_starts(threads)
    minute = format_datetime(t0)[:16]
    assert starts["a"] == minute and len(starts["a"]) == len("2026-12-07 09:15")
    assert starts["b"] == format_datetime(t0 + timedelta(hours=2))  # (one minute: to the second)
    assert starts["c"] == format_datetime(t0 + timedelta(hours=2, seconds=5))
    assert set(starts) == {"a", "b", "c"}  # one second (d, e), a title (f), no time (g): none
    assert thread_label(None, "a", frozenset(), "", starts.get("a")) == f"(untitled) · {minute}"
    assert thread_label(None, "thread_d", frozenset(), "thread_", starts.get("d")) == "(untitled) · …d"
    assert thread_label("Titled", "f", frozenset(), "", "2026-12-07 09:15") == "Titled"  # (a title of its own: as before)

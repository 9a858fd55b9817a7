"""How the thread tree names a thread (``studio.logic.thread_labels``; no Qt)."""

from __future__ import annotations

from studio.logic.thread_labels import repeated_titles, shared_id_prefix, thread_label

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

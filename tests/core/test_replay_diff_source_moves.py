"""A stored message that reaches two prompts by different ways (observational memory's unobserved messages in
one, semantic recall in the other) is the same text: the diff says it came another way and from where, not
"other", and never "observed by observational memory" when nothing was observed (found 2026-12-07 by walk4
replaying a real llama.cpp thread: turn 7 against turn 6 said "~4 changed (other, observed by observational
memory x3)" while the observation log was empty)."""

from __future__ import annotations

from core.prompt import AssembledPrompt, Fragment
from core.replay import prompt_diff

OPTIONS = {"last_messages": 6, "observational_memory": {"enabled": True}, "semantic_recall": {"enabled": True}}


def prompt(*fragments: tuple[str, str, str], asked_at: str = "2026-12-07T03:10:00.000Z") -> AssembledPrompt:
    """``fragments``: (message id, source, text) of conversation messages, in order, after the instructions, the
    n-th written at 03:0n; then the turn's input, written at ``asked_at``."""
    frags = [Fragment(0, "system", "Be terse.", "instructions", "instructions")]
    for i, (mid, source, text) in enumerate(fragments, start=1):
        frags.append(Fragment(i, "user", text, source, "memory", stored_ids=(mid,), detail={"messageId": mid},
                              created_at="2026-12-07T03:0%d:00.000Z" % i))
    frags.append(Fragment(len(frags), "user", "What now?", "input", "input", created_at=asked_at))
    return AssembledPrompt(messages=[], fragments=frags, skipped={}, tools=[], tokenizer="o200k_base",
                           thread_id="t", resource_id="ada", options=dict(OPTIONS), processors=[],
                           context_window=4096)


def test_a_message_that_moved_between_recall_and_unobserved_messages_says_so() -> None:
    before = prompt(("m1", "observational-memory", "I live in Porto."),
                    ("m2", "semantic-recall", "Bea is vegetarian."))
    after = prompt(("m1", "semantic-recall", "I live in Porto."),
                   ("m2", "observational-memory", "Bea is vegetarian."))
    changes = {c.stored_ids: c for c in prompt_diff(before, after)}
    assert changes[("m1",)].kind == changes[("m2",)].kind == "changed"
    assert changes[("m1",)].reason == changes[("m2",)].reason == "another-source"
    assert changes[("m1",)].source_before == "observational-memory" and changes[("m1",)].source == "semantic-recall"
    assert changes[("m2",)].source_before == "semantic-recall" and changes[("m2",)].source == "observational-memory"


def test_a_message_whose_text_changed_keeps_its_reason_and_names_no_other_source() -> None:
    before = prompt(("m1", "semantic-recall", "Bea is vegetarian."))
    after = prompt(("m1", "semantic-recall", "Bea is vegan."))
    (change,) = prompt_diff(before, after)
    assert change.kind == "changed" and change.reason != "another-source" and change.source_before is None


def test_an_unobserved_message_written_after_the_earlier_turn_entered_as_a_new_message() -> None:
    """Observational memory's unobserved messages grow by the earlier turn's reply: a new message, not
    "observed" (the walk's "+2 entered (observed by observational memory, new message)" with an empty log)."""
    before = prompt(("m1", "observational-memory", "I live in Porto."), asked_at="2026-12-07T03:01:30.000Z")
    after = prompt(("m1", "observational-memory", "I live in Porto."),
                   ("m2", "observational-memory", "Noted: Porto."))
    reasons = {c.stored_ids: c.reason for c in prompt_diff(before, after) if c.kind == "entered"}
    assert reasons[("m2",)] == "new-message"

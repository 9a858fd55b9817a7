"""The exact bytes the server received for a recorded model call, when they are knowable.

A call's request (``CallReplay.request``) equals the body the server received as JSON; its bytes
depend on how the model serialised it as well (key order, separators, escaping). A turn record names
that serialisation (``TurnRecord.wire``: ``core.llm.wire.OPENAI_PYTHON_WIRE`` for our
``OpenAICompatibleModel`` and for the Agents SDK's OpenAI client once its bytes were checked) and
keeps each call's bytes hash (``CallRecord.wire_hash``), taken only when the bytes the model's client
actually sent were the form's (``core.replay.capture.TurnCapture.add_call``). ``call_bytes`` makes the bytes again from
the rebuilt body and the record's ``stream`` keys and gives them only when they hash as the ones sent;
otherwise ``not_bytes_reason`` says why there are none (a custom model, an older record, a body that
no longer matches), and the Studio copies the body as JSON, labelled so.
"""

from __future__ import annotations

from core.llm.wire import WIRE_FORMS, wire_bytes
from core.replay.record import CallReplay, ReplayInfo, bytes_hash

#: Why a call has no bytes, in the words the request view shows beside "Copy Request Body (JSON)".
NOT_BYTES_CUSTOM = ("the body as JSON, not the bytes sent: this model's own code serialised the request (a custom "
                    "or scripted model), so its exact bytes are not known")
NOT_BYTES_OLD = ("the body as JSON, not the bytes sent: this turn was recorded before records kept how the body "
                 "was serialised")
NOT_BYTES_SDK = ("the body as JSON, not the bytes sent: the agent framework's client serialised this call in a way "
                 "its record cannot reproduce")
NOT_BYTES_CLIENT = ("the body as JSON, not the bytes sent: the model's HTTP client serialised this call differently "
                    "from how its record reproduces the bytes (a newer openai package, or bytes the request hook did "
                    "not see)")
NOT_BYTES_NEWER = ("the body as JSON, not the bytes sent: a newer Memory Studio recorded how the body was "
                   "serialised, in a form this one does not know")
NOT_BYTES_DIFFERS = ("the body as JSON, not the bytes sent: the rebuilt body no longer serialises to the bytes "
                     "the server received")
NOT_BYTES_PREVIEW = "the body as JSON: a preview was never sent"
NOT_BYTES_RECONSTRUCTED = ("the body as JSON, not the bytes sent: this turn has no record, so its body is "
                           "rebuilt from the database, with what that cannot know listed as unknown")
NOT_BYTES_WHAT_IF = "the body as JSON: a what-if's request was never sent"
NOT_BYTES_PARTIAL = ("the body as JSON, not the bytes sent: this call was taken from the agent framework's trace, "
                     "not from the wire")


def not_bytes_reason(info: ReplayInfo | None, call: CallReplay | None) -> str | None:
    """Why ``call`` has no exact bytes (None: it has them, ``call_bytes``)."""
    if info is None or call is None:
        return NOT_BYTES_PREVIEW
    if call.record is None:  # a stored turn that was sent, rebuilt without a record (or a what-if over one)
        return NOT_BYTES_WHAT_IF if info.what_if else NOT_BYTES_RECONSTRUCTED
    record = info.record
    if call.record.partial:
        return NOT_BYTES_PARTIAL
    if info.what_if:
        return NOT_BYTES_WHAT_IF
    if not call.matches:
        return NOT_BYTES_DIFFERS
    if record is None or record.wire is None:
        return NOT_BYTES_OLD
    if not record.wire or not call.record.wire_hash:
        if record.framework:
            return NOT_BYTES_SDK
        # Our own model named its form, but this call's bytes as sent were not the form's (``add_call``).
        return NOT_BYTES_CLIENT if record.wire else NOT_BYTES_CUSTOM
    if record.wire not in WIRE_FORMS:
        return NOT_BYTES_NEWER
    if bytes_hash(wire_bytes(dict(call.request), record.transport, record.wire)) != call.record.wire_hash:
        return NOT_BYTES_DIFFERS
    return None


def call_bytes(info: ReplayInfo | None, call: CallReplay | None) -> bytes | None:
    """The exact bytes the server received for ``call`` (its body with the ``stream`` keys, serialised
    as its model did), or None when they are not knowable (``not_bytes_reason`` says why)."""
    if not_bytes_reason(info, call) is not None:
        return None
    assert info is not None and call is not None and info.record is not None and info.record.wire is not None
    return wire_bytes(dict(call.request), info.record.transport, info.record.wire)


__all__ = ["NOT_BYTES_CLIENT", "NOT_BYTES_CUSTOM", "NOT_BYTES_DIFFERS", "NOT_BYTES_NEWER", "NOT_BYTES_OLD", "NOT_BYTES_PARTIAL",
           "NOT_BYTES_PREVIEW", "NOT_BYTES_RECONSTRUCTED", "NOT_BYTES_SDK", "NOT_BYTES_WHAT_IF", "call_bytes",
           "not_bytes_reason"]

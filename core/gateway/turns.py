"""One chat-completions request as one agent turn: who it is for, what was said, and its events.

Only the request's last message is taken, and it must be the user's: memory supplies the history.
A client that resends the whole conversation each time (as most OpenAI clients do) therefore gets
what the memory input filter gives an in-process caller that echoes stored messages: nothing is
stored or sent to the model twice.

Thread and resource come from ``metadata.thread_id`` / ``metadata.resource_id`` or the
``x-thread-id`` / ``x-resource-id`` headers; a ``metadata.conversation_id`` (or
``x-conversation-id``) names the thread ``conversation:<resource>:<conversation>``
(``conversation_thread_id``: ``%`` and ``:`` percent-encoded in both parts, so no two pairs share a
thread, and thread ids starting ``conversation:`` are refused when a client names them, so nobody
can take another resource's conversation first); OpenAI's ``user`` field names the resource when
nothing else does; then the caller's one resource (a tokens file's token with exactly one), else the
gateway's default resource. A caller whose token lists its resources may name only those, in every
one of these places (403 ``resource_not_allowed``, before anything is read or the model called). A request with no thread gets a new one, as
``Agent.generate`` does. A conversation that began before this encoding (thread
``<resource>:<conversation>``, owned by that resource) goes on in its old thread.

Events: a turn is an iterator of ``TextDelta`` then one ``TurnFinished``. With an agent that
streams (``Agent.stream``, yielding text deltas and tool events) the deltas come as the model
produces them; otherwise the turn runs with ``generate`` and its text is cut into deltas.
"""

from __future__ import annotations

import functools
import inspect
import logging
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from core.agent import IGNORED_BY_GATEWAY, Agent, AgentResult, SaveWith, TurnOutcome
from core.agent_stream import AgentStream
from core.llm.stopping import CallStop
from core.gateway.access import ANYONE, Caller, client_id
from core.gateway.errors import bad_request
from core.gateway.idempotency import single_header
from core.gateway.notices import om_notices, where_notices
from core.ids import MAX_NEW_ID, clipped, shown
from core.llm.base import Usage
from core.memory import resolve_memory
from core.messages import Message, text_part
from core.scopes import check_caller_owns

log = logging.getLogger(__name__)

#: The body fields a turn reads: the model (the agent), the messages (the last one), where the turn is stored
#: (``metadata``, ``user``) and how the reply travels. Any other field (a sampling setting, ``tools``,
#: ``response_format``, a provider's own field) is not used: the agent's own settings and tools are sent.
READ_FIELDS = frozenset({"model", "messages", "metadata", "user", "stream", "stream_options", "n"})
#: The keys of ``metadata`` a turn reads: where it is stored.
METADATA_READ = frozenset({"thread_id", "resource_id", "conversation_id"})
#: How ``ignored_fields`` names a client's system (or developer) message, which the agent's instructions replace.
SYSTEM_PROMPT_IGNORED = "messages (system prompt)"


def earlier_messages_ignored(count: int, has_memory: bool = True) -> str:
    """How ``ignored_fields`` names the ``count`` messages before the new one that are not system prompts: only the
    new message is taken, the thread's memory supplies the history; an agent without memory is sent no history at
    all (its ``not_stored`` notice says so too). Comma-free: the header lists names by commas."""
    why = "memory supplies the history" if has_memory else "the agent has no memory and is sent no history"
    return f"messages ({count} earlier: {why})"


#: At most this many field names are repeated back (a body may hold any number of keys).
MAX_IGNORED_SHOWN = 64
#: Threads of conversation ids live under this prefix, which clients may not use for thread ids.
CONVERSATION_PREFIX = "conversation:"
# Our finish reasons → the ones OpenAI clients know.
_FINISH = {"stop": "stop", "length": "length", "max-steps": "length", "content_filter": "content_filter"}


@dataclass(frozen=True)
class Turn:
    agent: str
    message: Message
    thread_id: str | None
    resource_id: str | None
    stream: bool
    include_usage: bool
    # A conversation's thread as it was named before conversation_thread_id (used while it exists).
    legacy_thread_id: str | None = None
    # The tokens file entry that sent the request (None: the shared token, or no token).
    caller: str | None = None
    # The request's fields the turn does not use (sampling settings, tools, ...: ``ignored_fields``).
    ignored: tuple[str, ...] = ()
    # Where the turn goes, as the client may not expect (``notices.where_notices``): the reply's ``memory.notices``.
    notices: tuple[dict[str, Any], ...] = ()

    def memory_arg(self) -> dict[str, Any]:
        return {"resource": self.resource_id, "thread": self.thread_id}

    def request_context(self) -> dict[str, Any]:
        values: dict[str, Any] = {"resourceId": self.resource_id, "threadId": self.thread_id, "agent": self.agent,
                                  "source": "gateway"}
        if self.caller is not None:  # who called, as the trace shows it: the token's name, never the token
            values["caller"] = self.caller
        if self.ignored:  # what the client asked for that the model was not sent, as the trace shows it
            values[IGNORED_BY_GATEWAY] = list(self.ignored)
        return values


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class TurnFinished:
    text: str
    finish_reason: str  # already OpenAI's
    usage: Usage | None
    trace_id: str | None
    # What the turn's memory did less of than asked (``core.gateway.notices``): the reply's ``memory.notices``.
    notices: tuple[dict[str, Any], ...] = ()


TurnEvent = TextDelta | TurnFinished


def parse_turn(body: Mapping[str, Any], headers: Mapping[str, str], *, model: str, has_memory: bool,
               default_resource: str, caller: Caller = ANYONE) -> Turn:
    """Check a chat-completions body and decide thread and resource; 400 with a reason otherwise, 403 when
    ``caller`` names a resource its token may not use."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of chat messages.", param="messages")
    n = body.get("n")
    if isinstance(n, bool) or n not in (None, 1):  # (JSON's true is no number, though Python's True == 1)
        raise bad_request(f"'n' must be 1, got {shown(n)}: only one choice per request is supported.", param="n")
    last = messages[-1]
    if not isinstance(last, Mapping) or last.get("role") != "user":
        raise bad_request("The last message must be the user's new message (role 'user'): the agent's memory "
                          "supplies the history.", param="messages")
    # Text parts as llama.cpp and vLLM read them, joined by a new line: one text, which the model is sent and memory
    # stores (parts kept apart would be joined by a space, ``Message.text``: "A\n" and "B" sent as "A\n B").
    message = Message.create("user", [text_part("\n".join(_texts(last.get("content"))))])
    if not message.text.strip():
        raise bad_request("The user message has no text.", param="messages")

    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise bad_request("'metadata' must be an object.", param="metadata")
    metadata = metadata or {}
    thread = _one("thread_id", metadata.get("thread_id"), single_header(headers, "x-thread-id"))
    resource = _one("resource_id", metadata.get("resource_id"), single_header(headers, "x-resource-id"))
    conversation = _one("conversation_id", metadata.get("conversation_id"), single_header(headers, "x-conversation-id"))
    user = client_id("user", body.get("user"))
    unused = unused_ids(metadata, headers, user_beside=resource if user else None, has_memory=has_memory)
    defaulted = not (resource or user) and caller.only_resource is None
    # (``user`` names the resource only when nothing else does: beside a resource id it is the end-user tag
    # OpenAI's clients send, never read, so only the resource the turn is about is checked)
    resource = caller.resource_for(resource or user, param="user" if user and not resource else "metadata.resource_id",
                                   fallback=default_resource)
    assert resource is not None
    if conversation and thread:
        raise bad_request("Give either a thread id or a conversation id, not both.", param="metadata")
    if thread and thread.startswith(CONVERSATION_PREFIX):
        raise bad_request(f"Thread ids starting with {CONVERSATION_PREFIX!r} belong to conversation ids; send "
                          "metadata.conversation_id (or x-conversation-id) instead.", param="metadata")
    legacy, new_thread = None, None
    if not has_memory:
        thread = None  # nothing to remember in; the ids would only mislead
    elif conversation:
        thread, legacy = conversation_thread_id(resource, conversation), f"{resource}:{conversation}"
    elif not thread:
        thread = new_thread = f"thread_{uuid.uuid4().hex[:16]}"
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        # Answering a JSON completion to a client that asked (wrongly) for events fails in its parser instead.
        raise bad_request(f"'stream' must be true or false, got {shown(stream)}.", param="stream")
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, Mapping):
        raise bad_request("'stream_options' must be an object, like {\"include_usage\": true}.",
                          param="stream_options")
    include_usage = stream_options.get("include_usage") if isinstance(stream_options, Mapping) else None
    if include_usage is not None and not isinstance(include_usage, bool):  # ("false" and 1 asked for usage)
        raise bad_request(f"'stream_options.include_usage' must be true or false, got {shown(include_usage)}.",
                          param="stream_options")
    notices = where_notices(agent=model, has_memory=has_memory, resource=resource, defaulted=defaulted,
                            new_thread=new_thread)
    return Turn(model, message, thread, resource, body.get("stream") is True, include_usage is True, legacy,
                caller.name, ignored_fields(body, has_memory=has_memory, unused=unused), tuple(notices))


#: How ``unused_ids`` names a thread or conversation id sent to an agent without memory.
NO_MEMORY_ID = "the agent has no memory: no thread is read or stored"


def unused_ids(metadata: Mapping[str, Any], headers: Mapping[str, str], *, user_beside: str | None,
               has_memory: bool) -> list[str]:
    """The ids of a chat body (``metadata``) or its headers the turn does not use, in ``ignored_fields``' words
    (comma-free, as the header lists names by commas): ``user`` beside a resource id (``user_beside``, non-empty
    when both came: the resource id names the resource and ``user`` is the end-user tag OpenAI's clients send), and
    the thread and conversation ids sent to an agent without memory (``NO_MEMORY_ID``)."""
    names = []
    if user_beside:
        by = "metadata.resource_id" if metadata.get("resource_id") else "the x-resource-id header"
        names.append(f"user ({by} names the resource)")
    if not has_memory:
        for key in ("thread_id", "conversation_id"):
            if metadata.get(key):
                names.append(f"metadata.{key} ({NO_MEMORY_ID})")
            if single_header(headers, f"x-{key.replace('_', '-')}"):
                names.append(f"x-{key.replace('_', '-')} header ({NO_MEMORY_ID})")
    return names


def ignored_fields(body: Mapping[str, Any], *, has_memory: bool = True, unused: Iterable[str] = ()) -> tuple[str, ...]:
    """The fields of a chat-completions body the turn does not use (``READ_FIELDS``), sorted, after
    ``SYSTEM_PROMPT_IGNORED`` when the messages hold a system or developer message and
    ``earlier_messages_ignored`` when they hold others before the new one; each name cut
    to ``SHOWN_CHARS`` and at most ``MAX_IGNORED_SHOWN`` of them (then "… and N more"): the answer and the
    turn's trace say them, so a client that sent ``temperature`` learns it was not the one used, and one that sent
    a conversation's earlier messages to a new thread learns they were not stored. What of the new message is not
    used comes first (``new_message_ignored``); ``metadata``'s keys other than the ids are ``metadata.<key>``; the
    ids read but not used (``unused``: ``unused_ids``) are sorted in with the fields."""
    names = sorted([*(clipped(str(k)) for k in body if k not in READ_FIELDS), *unused])
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):  # (its other keys are not stored: OpenAI keeps them with a stored completion)
        names = sorted([*names, *(f"metadata.{clipped(str(k))}" for k in metadata if k not in METADATA_READ)])
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], Mapping):
        names[:0] = new_message_ignored(messages[-1])
    earlier = messages[:-1] if isinstance(messages, list) else []
    prompts = sum(1 for m in earlier if isinstance(m, Mapping) and m.get("role") in ("system", "developer"))
    if len(earlier) > prompts:  # (a client resending its whole conversation is told each time: they were not used)
        names.insert(0, earlier_messages_ignored(len(earlier) - prompts, has_memory))
    if prompts:
        names.insert(0, SYSTEM_PROMPT_IGNORED)  # the agent's instructions are sent instead
    if len(names) > MAX_IGNORED_SHOWN:
        names = [*names[:MAX_IGNORED_SHOWN], f"… and {len(names) - MAX_IGNORED_SHOWN:,} more"]
    return tuple(names)


def new_message_ignored(message: Mapping[str, Any]) -> list[str]:
    """How ``ignored_fields`` names what of the new message the turn does not use: its fields besides ``role`` and
    ``content`` (a participant's ``name``), and those of its text parts besides ``type`` and ``text`` (a
    ``cache_control``): the model is sent its text alone, and only its text is stored."""
    names = [f"messages ({clipped(str(k))} of the new message)" for k in message if k not in ("role", "content")]
    content = message.get("content")
    parts = content if isinstance(content, list) else []
    extra = dict.fromkeys(str(k) for p in parts if isinstance(p, Mapping) for k in p if k not in ("type", "text"))
    names += [f"messages ({clipped(k)} of the new message's text parts)" for k in extra]
    return names


def conversation_thread_id(resource_id: str, conversation_id: str) -> str:
    """The thread of a resource's conversation. ``%`` and ``:`` are percent-encoded in both parts, so
    the id splits back into exactly one (resource, conversation) pair."""
    return f"{CONVERSATION_PREFIX}{_escape(resource_id)}:{_escape(conversation_id)}"


def anothers_conversation(thread_id: str, resource_id: str) -> bool:
    """Whether ``thread_id`` names a conversation thread of a resource other than ``resource_id``: a
    thread created under such an id would lock its resource out of that conversation (403), so
    nothing may create one for ``resource_id`` (the MCP server's ``remember`` asks this)."""
    return thread_id.startswith(CONVERSATION_PREFIX) and \
        not thread_id.startswith(conversation_thread_id(resource_id, ""))


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


def _unescape(part: str) -> str:
    return part.replace("%3A", ":").replace("%25", "%")


def resolve_thread(agent: Agent, turn: Turn) -> Turn:
    """``turn`` in the thread it continues: a conversation begun under the old ``<resource>:<id>``
    naming goes on there while its new thread does not exist yet and the old one is the resource's
    own (so a thread someone else created under that name is never joined). Runs on a worker thread."""
    if turn.thread_id is None:
        return turn
    memory = resolve_memory(agent.memory, turn.request_context())
    if memory is None:
        return turn
    thread = memory.get_thread(turn.thread_id)
    if thread is not None:
        if not thread.resource_id:
            # A thread without an owner (another program stored it so) is nobody's: the turn's own check lets it
            # through, and a client would read it and add to it under any resource. (Another resource's thread is
            # refused by the turn, which traces the refusal.)
            check_caller_owns(thread.id, thread.resource_id or "", turn.resource_id or "")
        return turn
    if turn.legacy_thread_id is None:
        return turn
    old = memory.get_thread(turn.legacy_thread_id)
    if old is None or old.resource_id != turn.resource_id:
        return turn
    return replace(turn, thread_id=old.id)


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        texts: list[str] = []
        for number, part in enumerate(content, 1):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                what = "a text part without a string 'text'" if kind == "text" else f"of type {shown(kind)}"
                raise bad_request(
                    f"Content part {number} of the new message is {what}: the gateway takes text only (a string, or "
                    "parts like {\"type\": \"text\", \"text\": \"...\"}), which is what the agent's model is "
                    "sent and its memory stores. Send the text alone (an image or file as a link or a description in "
                    "it). Nothing was stored or sent to the model.", param="messages")
            texts.append(part["text"])
        return texts
    raise bad_request("The user message's 'content' must be a string or a list of text parts.", param="messages")


def _one(name: str, from_body: Any, from_header: Any) -> str | None:
    header = f"x-{name.replace('_', '-')}"
    if isinstance(from_header, str) and not from_header.isascii():
        # A header carries bytes: the server reads them as Latin-1, and a client may have sent UTF-8 (curl, most
        # HTTP libraries given bytes), so "josé" would arrive as "josÃ©", another resource, the same as a client
        # naming "josÃ©" in metadata. Non-ASCII ids go in the body, which is UTF-8 JSON.
        raise bad_request(f"The {header} header holds characters outside ASCII, which HTTP headers cannot carry "
                          f"unambiguously; send this id as metadata.{name} in the request body instead.",
                          param=header)
    body_value, header_value = client_id(name, from_body), client_id(name, from_header)
    if body_value and header_value and body_value != header_value:
        raise bad_request(f"metadata.{name} ({shown(body_value)}) and the {header} header "
                          f"({shown(header_value)}) disagree; send one.", param="metadata")
    return body_value or header_value


def client_thread(name: str, value: str) -> str:
    """A thread id a client names to read or write one (the memory API's path, an MCP tool's ``thread``):
    ``client_id``'s rule (400), but for the ids the gateway makes itself from two ids a client named, each of which
    follows it: a conversation's thread (``conversation_thread_id``) and one begun before that encoding
    (``<resource>:<conversation>``), which may be longer than ``MAX_NEW_ID``."""
    if isinstance(value, str) and MAX_NEW_ID < len(value) and ":" in value and value.isprintable():
        if value.startswith(CONVERSATION_PREFIX):
            parts = value[len(CONVERSATION_PREFIX):].split(":")
            if len(parts) == 2 and conversation_thread_id(*(_unescape(p) for p in parts)) == value:
                for part, what in zip(parts, ("resource", "conversation")):
                    client_id(f"{name} (its {what} id)", _unescape(part))
                return value
        if len(value) <= 2 * MAX_NEW_ID + 1 and any(
                c == ":" and 0 < i <= MAX_NEW_ID and len(value) - i - 1 <= MAX_NEW_ID for i, c in enumerate(value)):
            return value  # (a legacy conversation thread's length: two parts of at most MAX_NEW_ID each)
    named = client_id(name, value)
    if named is None:  # (client_id's "not given")
        raise bad_request(f"{name} must be a printable string of at most {MAX_NEW_ID} characters, got '': it is "
                          "empty. Nothing was read or written.", param=name)
    return named


# -- running ----------------------------------------------------------------------------------------


def run_turn(agent: Agent, turn: Turn, save_with: SaveWith | None = None, stop: CallStop | None = None) -> AgentResult:
    """The whole turn, synchronously (the gateway calls this on a worker thread). ``save_with``: as
    ``Agent.generate``'s (an idempotency key's outcome, saved with the turn); ``stop``: triggered when the client
    leaves."""
    return agent.generate(turn.message, memory=turn.memory_arg(), request_context=turn.request_context(),
                          **_extras(agent.generate, save_with, stop))


def finished(result: AgentResult | TurnOutcome) -> TurnFinished:
    """The end of a turn as a client sees it, from its result (or, before it is saved, its ``TurnOutcome``)."""
    notices = om_notices(p.notes for p in result.prompts)
    return TurnFinished(result.text, openai_finish_reason(result.finish_reason), result.usage, result.trace_id,
                        tuple(notices))


def openai_finish_reason(reason: str | None) -> str:
    return _FINISH.get(reason or "stop", "stop")


def turn_events(agent: Agent, turn: Turn, save_with: SaveWith | None = None,
                stop: CallStop | None = None) -> Generator[TurnEvent, None, None]:
    """The turn as text deltas and a final ``TurnFinished``; runs on a worker thread."""
    yield from _from_agent_stream(
        agent.stream(turn.message, memory=turn.memory_arg(), request_context=turn.request_context(),
                     **_extras(agent.stream, save_with, stop)))


def _extras(call: Callable[..., Any], save_with: SaveWith | None, stop: CallStop | None) -> dict[str, Any]:
    """``save_with`` only when there is one, and ``stop`` only to a ``call`` that takes it: an ``Agent`` subclass
    whose ``generate``/``stream`` predates them (or takes no such argument) still serves requests without a key,
    and runs to its end when its client leaves (a plain turn is then stored; a streamed one's stream is closed,
    which saves nothing)."""
    extras: dict[str, Any] = {} if save_with is None else {"save_with": save_with}
    if stop is not None and _takes_stop(getattr(call, "__func__", call)):
        extras["stop"] = stop
    return extras


@functools.lru_cache(maxsize=64)
def _takes_stop(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "stop" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _from_agent_stream(stream: AgentStream) -> Generator[TurnEvent, None, None]:
    """Adapt ``Agent.stream``'s events: text deltas pass on; tool events are skipped (an OpenAI
    chat client has no place for them); ``finish`` carries the ``AgentResult``. Closing the stream
    when the client leaves abandons the turn, which is then not saved."""
    done: TurnFinished | None = None
    try:
        for event in stream:
            if event.kind == "text-delta" and event.text:
                yield TextDelta(event.text)
            elif event.kind == "finish" and event.result is not None:
                done = finished(event.result)
    finally:
        stream.close()
    if done is None:  # the stream ended without ``finish``: the turn failed and raised already
        raise RuntimeError("the agent's stream ended without finishing the turn")
    yield done


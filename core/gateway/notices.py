"""What a gateway turn tells its client about its memory besides the reply: ``memory.notices``.

A turn can succeed while its memory did less than asked, or otherwise than its client may think:
observational memory's observer (or reflector) failed and the messages stay raw until it is tried again; the
agent has no memory and stored nothing; the request named no resource (stored under the gateway's default one,
which all such requests share) or no thread (a new one, without the history of any other).
The server's log, the trace and the Studio say so; a client reads only the reply, so the reply's ``memory``
object carries each as ``{"code", "message"}`` (and ``retry_at`` for a failed call), and the
``x-memory-notices`` header names their codes (a streamed reply's: those known before the turn ran).

Nothing here goes to the model: the notices are read from the turn's prompt notes once it has run.
A failure's text is the one the Studio shows the thread's owner, which the gateway's 502 shows a client
too for a failing model (its endpoint and status, never a key); an error of another kind (a bug, a
storage failure) may name the server's files or databases, so its words are left to the log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from core.llm.base import ModelError
from core.observational.reflector import ReplyCutOff

#: The response header naming the turn's notices' codes.
NOTICES_HEADER = "x-memory-notices"
#: The observational-memory processor's id, under which its notes are kept.
_OM = "observational-memory"
#: (note key, code) of each observational-memory failure a turn can meet.
_OM_FAILURES = (("observation", "observation_failed"), ("reflection", "reflection_failed"))
# Where an error's text names the exception it came from: ``jobs.observe``'s "observer call failed: <Name>: …" and
# the reflector's "level 0: <Name>: …" (any name); elsewhere, a word that looks like one ("KeyError: ", "DbLocked: ").
_ANCHORED_NAME = re.compile(r"(?:call failed|levels? [0-9][0-9–, ]*): ([A-Za-z_][A-Za-z0-9_]*): ")
_WORD_BEFORE_COLON = re.compile(r"\b([A-Z][A-Za-z0-9_]*): ")
_EXCEPTION_ENDINGS = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Iteration")
_UNSHOWN = ("the {what} failed with an unexpected error, whose text is for the gateway's operator (the server's "
            "log has it); {meanwhile}")


def om_notices(notes: Iterable[Mapping[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The notices of observational memory's notes over a turn's prompts (the first of each kind)."""
    notices: dict[str, dict[str, Any]] = {}
    for prompt_notes in notes:
        om = prompt_notes.get(_OM) or {}
        for what, code in _OM_FAILURES:
            error = om.get(f"{what}Error")
            if code in notices or not isinstance(error, str) or not error:
                continue
            notice: dict[str, Any] = {"code": code, "message": _shown(error, what)}
            retry_at = om.get(f"{what}RetryAt")
            if isinstance(retry_at, str):
                notice["retry_at"] = retry_at
            notices[code] = notice
    return list(notices.values())


def _shown(error: str, what: str) -> str:
    """``error`` as a client may read it: as it is when every exception it names is a model's failure."""
    named = [*_ANCHORED_NAME.findall(error), *(word for word in _WORD_BEFORE_COLON.findall(error)
                                                if _looks_like_exception(word))]
    if all(name in _client_errors() for name in named):
        return error
    if what == "observation":
        return _UNSHOWN.format(what="observer", meanwhile="the messages stay raw meanwhile")
    return _UNSHOWN.format(what="reflector", meanwhile="the observations are kept as they are meanwhile")


def _looks_like_exception(word: str) -> bool:
    """An exception class's name by its form: "…Error" and the like, or CamelCase of two words or more."""
    return word.endswith(_EXCEPTION_ENDINGS) or (any(c.isupper() for c in word[1:]) and any(c.islower() for c in word))


def _client_errors() -> frozenset[str]:
    """The exception names whose text the gateway shows a client: ``ModelError`` and its kinds (as its 502s do),
    and a reply cut off at its length cap."""
    names, todo = {ReplyCutOff.__name__}, [ModelError]
    while todo:
        kind = todo.pop()
        names.add(kind.__name__)
        todo.extend(kind.__subclasses__())
    return frozenset(names)


def where_notices(*, agent: str, has_memory: bool, resource: str | None, defaulted: bool,
                  new_thread: str | None) -> list[dict[str, Any]]:
    """The notices of where a turn goes, known before it runs: an agent without memory stores nothing
    (``not_stored``); a request naming no resource is stored under the gateway's default one
    (``default_resource``), and one naming no thread begins a new one (``new_thread``)."""
    if not has_memory:
        return [{"code": "not_stored", "message": f"The agent {agent!r} has no memory: nothing of this turn was "
                 "stored, and the model was sent only your last message (the gateway reads no earlier one)."}]
    notices: list[dict[str, Any]] = []
    if defaulted:
        notices.append({"code": "default_resource", "message": (
            f"This request named no resource (metadata.resource_id, the x-resource-id header or the user field), so "
            f"the turn was stored under the gateway's default resource {resource!r}, which every request naming "
            "none shares, with its working memory and what resource-scoped recall finds. Name one per user to keep "
            "their memories apart.")})
    if new_thread is not None:
        notices.append({"code": "new_thread", "message": (
            f"This request named no thread (metadata.thread_id, the x-thread-id header or a conversation id), so "
            f"the turn began a new thread, {new_thread!r}, holding no history but this turn. Send that id "
            "with the next request to go on with it: one naming none begins another.")})
    return notices


def notices_header(notices: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    codes = ", ".join(dict.fromkeys(str(n["code"]) for n in notices))
    return {NOTICES_HEADER: codes} if codes else {}

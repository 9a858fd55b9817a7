"""Demo data, made by running the real engine: agents, processors and storage, with scripted models.

Nothing here inserts rows by hand. Each conversation is an ``Agent.generate`` call per user turn, so
the stored messages, working memory (template and schema mode), recall index and traces are exactly
what a real agent would leave behind. The scripted models are labelled ``scripted/…`` everywhere.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence

from core.agent import Agent, Tool
from core.memory import Memory
from core.llm.scripted import ScriptedModel, ScriptedReply, ScriptStep, tool_call
from core.options import MemoryOptions
from core.storage import Store

log = logging.getLogger(__name__)

DEMO_START = datetime(2026, 9, 14, 9, 0, tzinfo=timezone.utc)

CHEF_TEMPLATE = """# Diner profile
- **Name**:
- **Allergies**:
- **Diet**:
- **Favourite cuisines**:
- **City**:
"""

TRAVEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "home_city": {"type": "string"},
        "preferences": {
            "type": "object",
            "properties": {"food": {"type": "string"}, "seat": {"type": "string"}, "language": {"type": "string"}},
        },
        "upcoming_trips": {"type": "array", "items": {"type": "string"}},
    },
}


@dataclass
class DemoReport:
    resources: list[str] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)
    turns: int = 0
    recall: str = "off"
    traces: int = 0

    def summary(self) -> str:
        return (
            f"demo data: {len(self.resources)} resources, {len(self.threads)} threads, {self.turns} turns "
            f"(scripted models); semantic recall: {self.recall}"
        )


@dataclass
class _Turn:
    user: str
    replies: Sequence[ScriptStep]


def _recall_embedder() -> tuple[Any, str]:
    """The real multilingual model when it is installed (``make run`` provisions it)."""
    try:
        from core.embedding import default_embedder
        from core.embedding.models import ALIASES, configured_model

        chosen = configured_model()  # $MEMORY_STUDIO_EMBEDDER, else use: the label names the model that indexed
        label = next((alias for alias, name in ALIASES.items() if name == chosen.name), chosen.name)
        return default_embedder(chosen.name), label
    except Exception as exc:  # noqa: BLE001 - the demo still runs; it says which embedder it used, and why
        from core.embedding import HashingEmbedder
        from core.embedding.base import EmbedderError, ModelNotInstalledError

        if isinstance(exc, EmbedderError) and not isinstance(exc, ModelNotInstalledError):
            return HashingEmbedder(dim=256), f"hashing ({exc})"  # e.g. a misspelt $MEMORY_STUDIO_EMBEDDER
        return HashingEmbedder(dim=256), ("hashing (model not installed: run `memory-studio models install`, "
                                          "then `memory-studio reindex --model use`)")


def _weather(args: dict[str, Any], _ctx: Any) -> dict[str, Any]:
    city = str(args.get("city", "?"))
    table = {"Oslo": ("4°C", "light rain"), "Lisbon": ("19°C", "sunny"), "上海": ("24°C", "多云")}
    temp, sky = table.get(city, ("15°C", "cloudy"))
    return {"city": city, "temperature": temp, "conditions": sky}


WEATHER = Tool(
    name="getWeather",
    description="Current weather for a city.",
    fn=_weather,
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


# Sampling settings some demo agents send with every call (the Replay pane shows them per model call).
_MODEL_SETTINGS: dict[str, dict[str, Any]] = {
    "travel": {"temperature": 0.4, "max_tokens": 300, "top_p": 0.9},
    "chef": {"temperature": 0.7, "max_tokens": 400},
}


def seed_demo(store: Store, *, progress: Callable[[int, int], None] | None = None) -> DemoReport:
    report = DemoReport()
    tracer = store.tracer()  # the demo leaves real traces in the DuckDB file beside the database
    embedder, recall_name = _recall_embedder()
    report.recall = recall_name
    clock = _StepClock(DEMO_START)

    chef_memory = Memory(
        store,
        MemoryOptions(
            last_messages=10,
            working_memory={"enabled": True, "scope": "resource", "template": CHEF_TEMPLATE},
            semantic_recall={"top_k": 3, "message_range": 1, "scope": "resource"},
        ),
        embedder=embedder, name="chef", clock=clock, tracer=tracer,
    )
    travel_memory = Memory(
        store,
        MemoryOptions(
            last_messages=8,
            working_memory={"enabled": True, "scope": "resource", "schema": TRAVEL_SCHEMA},
            semantic_recall={"top_k": 3, "message_range": 1, "scope": "resource"},
        ),
        embedder=embedder, name="travel", clock=clock, tracer=tracer,
    )
    notes_memory = Memory(
        store,
        MemoryOptions(last_messages=6, working_memory={"enabled": True, "scope": "thread", "version": "vnext",
                                                        "template": "# Session notes\n- Goal:\n- Decisions:\n"}),
        name="notes", clock=clock, tracer=tracer,
    )

    # Observational memory with a low message threshold, so a few turns are enough for the observer
    # to turn the stand-up into dated observation lines (and leave hints on the thread). The observer
    # buffers in the background as the conversation goes; the demo waits for it after each turn so
    # the data is the same on every run: some observations activated, one still buffered.
    standup_memory = Memory(
        store,
        MemoryOptions(observational_memory={"enabled": True, "message_tokens": 120, "observation_tokens": 100_000,
                                            "buffer_tokens": 0.3, "block_after": 2.0}),
        name="notes-om", clock=clock, tracer=tracer,
        observer_model=ScriptedModel(standup_observer, name="observer-demo"),
    )

    conversations: list[tuple[Memory, str, str, str, str, list[_Turn], Sequence[Tool]]] = [
        (chef_memory, "chef", "ada", "ada-groceries", "Weekly groceries", [
            _Turn("Hi! I'm Ada. Quick heads-up: I'm allergic to peanuts, so please keep them out of any recipe.", [
                ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": CHEF_TEMPLATE.replace(
                    "- **Name**:", "- **Name**: Ada").replace("- **Allergies**:", "- **Allergies**: peanuts")}),)),
                "Thanks Ada, noted: no peanuts, ever. What would you like to cook this week?",
            ]),
            _Turn("Something vegetarian and quick. I love Thai food.", [
                ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": CHEF_TEMPLATE.replace(
                    "- **Name**:", "- **Name**: Ada").replace("- **Allergies**:", "- **Allergies**: peanuts").replace(
                    "- **Diet**:", "- **Diet**: vegetarian").replace("- **Favourite cuisines**:",
                                                                      "- **Favourite cuisines**: Thai")}),)),
                "A green curry with tofu and vegetables takes 25 minutes; I'll use cashew-free coconut sauce.",
            ]),
            _Turn("Great, add rice noodles and limes to the list.", [
                "Added: rice noodles, limes, tofu, green curry paste, coconut milk, Thai basil.",
            ]),
        ], ()),
        (chef_memory, "chef", "ada", "ada-weekend", "Weekend plans", [
            _Turn("What's the weather in Oslo this weekend? I might grill outside.", [
                ScriptedReply(tool_calls=(tool_call("getWeather", {"city": "Oslo"}),)),
                "Oslo looks cold and wet (4°C, light rain), so an indoor dinner is the safer plan.",
            ]),
            _Turn("Can you suggest a Thai place for Saturday instead?", [
                "Try a restaurant with a clear allergen menu and ask them to skip peanuts in the satay "
                "and pad thai — both usually contain them.",
            ]),
        ], (WEATHER,)),
        (chef_memory, "chef", "ada", "ada-party", "Birthday party", [
            _Turn("I'm hosting a birthday dinner. Which dishes should I avoid because of my allergy?", [
                "Skip satay sauce, pad thai toppings and most praline desserts; they are the usual peanut traps.",
            ]),
        ], ()),
        (travel_memory, "travel", "li-wei", "liwei-shanghai", "上海出差", [
            _Turn("你好，我叫李伟，住在上海。下个月要去里斯本出差。", [
                ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {
                    "name": "李伟", "home_city": "上海", "upcoming_trips": ["里斯本（下个月）"]}}),)),
                "你好李伟！里斯本出差的行程我记下了。需要我帮你查航班吗？",
            ]),
            _Turn("我不吃辣，飞机上喜欢靠窗的座位。", [
                ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {
                    "preferences": {"food": "不吃辣", "seat": "靠窗"}}}),)),
                "明白：不吃辣、靠窗座位。我会按这个偏好帮你挑选航班和餐厅。",
            ]),
            _Turn("里斯本现在天气怎么样？", [
                ScriptedReply(tool_calls=(tool_call("getWeather", {"city": "Lisbon"}),)),
                "里斯本现在 19°C，晴天，很适合步行。",
            ]),
        ], (WEATHER,)),
        (travel_memory, "travel", "li-wei", "liwei-lisbon", "Lisbon restaurants", [
            _Turn("I'll be in Lisbon for work. Any restaurant tips? Please reply in English.", [
                ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {
                    "preferences": {"language": "English for restaurant tips"}}}),)),
                "Try grilled fish in Alfama; the dishes there are mild, which suits your no-spice preference.",
            ]),
        ], ()),
        (notes_memory, "notes", "sam", "sam-retro", "Sprint retro", [
            # The vNext tool: edits in place, each with a reason the Studio's version history shows.
            _Turn("Let's plan the sprint retro. Goal: decide whether to keep weekly releases.", [
                ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {
                    "newMemory": "# Session notes\n- Goal: decide whether to keep weekly releases\n- Decisions:",
                    "updateReason": "append-new-memory"}),)),
                "Good goal. Shall we list what went well with weekly releases first?",
            ]),
            _Turn("Decision: we keep weekly releases but freeze on Thursdays.", [
                ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {
                    "searchString": "- Decisions:",
                    "newMemory": "- Decisions: keep weekly releases; code freeze on Thursdays",
                    "updateReason": "clarify-existing-memory"}),)),
                "Recorded: weekly releases stay, with a Thursday code freeze.",
            ]),
        ], ()),
        (standup_memory, "notes-om", "sam", "sam-standup", "Daily stand-up", [
            _Turn("Morning! Stand-up time. Yesterday I finished the login page redesign, got two approvals "
                  "and merged it into main before lunch.", [
                "Nice work on the login page redesign, and good to have it merged early. "
                "What are you picking up today?",
            ]),
            _Turn("Today I'm starting on the password reset email. It has to ship before Thursday's code "
                  "freeze, so I want it in review by Wednesday.", [
                "Got it: the password reset email, in review by Wednesday and shipped before the Thursday "
                "freeze. Anything blocking you?",
            ]),
            _Turn("One blocker: I still don't have access to the staging mail server, so I can't test the "
                  "email end to end. Priya can grant it.", [
                "Noted. I suggest pinging Priya right after the stand-up so the staging access is sorted "
                "today and testing isn't delayed.",
            ]),
            _Turn("Also, Jonas is on holiday until Monday, so I'm covering his on-call shift on Wednesday "
                  "and may be slower on the email that day.", [
                "Understood: you cover Jonas's on-call shift on Wednesday. Plan the review of the reset "
                "email for Tuesday evening to keep the deadline.",
            ]),
            _Turn("That's all from me. Can you remind me what I said my blocker was, so I can message Priya?", [
                "Your blocker is access to the staging mail server; Priya can grant it.",
            ]),
        ], ()),
    ]

    total = sum(len(turns) for *_, turns, _tools in conversations)
    done = 0
    for memory, agent_name, resource, thread, title, turns, tools in conversations:
        script: list[ScriptStep] = [step for turn in turns for step in turn.replies]
        agent = Agent(agent_name, instructions=_INSTRUCTIONS[agent_name],
                      model=ScriptedModel(script, name=f"{agent_name}-demo"), memory=memory, tools=tools,
                      tracer=tracer, model_settings=_MODEL_SETTINGS.get(agent_name))
        if memory.get_thread(thread) is None:
            memory.create_thread(resource_id=resource, thread_id=thread, title=title)
        for turn in turns:
            agent.generate(turn.user, memory={"resource": resource, "thread": thread})
            memory.wait_idle(60)  # background observations land between turns, the same way every run
            report.turns += 1
            done += 1
            if progress:
                progress(done, total)
        if resource not in report.resources:
            report.resources.append(resource)
        report.threads.append(thread)
    # The memories without semantic recall (the notes agents) key their messages' keyword docs as they save
    # (``core.recall.own_docs``); whatever else waits (a key that failed) is applied now, so the database the
    # command leaves has nothing pending, and a search does not say "some recent message changes are not
    # keyword-indexed yet" of a demo just made (keyword docs only; those messages get vectors from `memory-studio reindex`).
    index = chef_memory.recall_index
    if index is not None:
        left = index.sync_keywords(limit=10_000)
        if left is not None:
            log.warning("demo: %s", left)
    tracer.flush(5.0)
    return report


# The demo observer: it reads the history it is sent (``core.observational.observer.format_history``)
# and writes one observation per message it knows, at that message's time, so its output follows
# whatever batch the background observer hands it (buffering decides the batches, not the script).
_STANDUP_NOTES: list[tuple[str, str]] = [
    ("finished the login page redesign", "🔴 Sam finished the login page redesign yesterday and merged it into main."),
    ("Nice work on the login page", "🟢 Assistant acknowledged the merged redesign and asked for today's plan."),
    ("starting on the password reset email", "🔴 Sam starts on the password reset email today; in review by "
                                             "Wednesday, shipped before Thursday's code freeze."),
    ("Anything blocking you", "🟡 Assistant asked whether anything blocks the work."),
    ("access to the staging mail server", "🔴 Sam is blocked: no access to the staging mail server, so no "
                                          "end-to-end email test; Priya can grant it."),
    ("pinging Priya", "🟡 Assistant suggested pinging Priya right after the stand-up."),
    ("Jonas is on holiday", "🔴 Jonas is on holiday until Monday; Sam covers his on-call shift on Wednesday."),
    ("review of the reset email for Tuesday", "🟢 Assistant advised putting the reset email in review on Tuesday "
                                             "evening to keep the deadline."),
    ("remind me what I said my blocker was", "🟢 Sam closed the stand-up and asked for a reminder of the blocker."),
]
_LINE_RE = re.compile(r"^(User|Assistant)(?: \((\d{1,2}):(\d{2}) (AM|PM)\))?: (.*)$")


def standup_observer(messages: list[dict[str, Any]], tools: Any) -> str:
    """The demo's observer (see ``_STANDUP_NOTES``)."""
    history = str(messages[-1].get("content") or "")
    lines, clock = [], "00:00"
    blocker = "Priya" in str(messages[1].get("content") or "")  # already in the previous observations
    for raw in history.splitlines():
        match = _LINE_RE.match(raw.strip())
        if match is None:
            continue
        if match.group(2):
            hour = int(match.group(2)) % 12 + (12 if match.group(4) == "PM" else 0)
            clock = f"{hour:02d}:{match.group(3)}"
        note = next((n for key, n in _STANDUP_NOTES if key in match.group(5)), None)
        if note is not None:
            mark, text = note.split(" ", 1)
            lines.append(f"* {mark} ({clock}) {text}")
            blocker = blocker or "Priya" in text
    task = ("Primary: daily stand-up with Sam; the open blocker is staging mail server access (Priya)."
            if blocker else "Primary: daily stand-up with Sam; collecting today's plan and blockers.")
    suggested = ("Remind Sam that the blocker is staging mail server access, which Priya can grant." if blocker
                 else "Ask whether anything blocks the password reset email.")
    body = "\n".join(lines) or "* 🟢 (00:00) Small talk during the stand-up."
    return (f"<observations>\nDate: Sep 14, 2026\n{body}\n</observations>\n\n<current-task>\n{task}\n"
            f"</current-task>\n\n<suggested-response>\n{suggested}\n</suggested-response>")


_INSTRUCTIONS = {
    "chef": "You are a friendly cooking assistant. Respect the user's allergies and diet at all times.",
    "travel": "You are a travel assistant. Answer in the language the user writes in unless asked otherwise.",
    "notes": "You are a meeting facilitator. Keep short notes of goals and decisions.",
    "notes-om": "You are a stand-up facilitator. Keep track of each person's plan and blockers.",
}


class _StepClock:
    """Demo conversations get plausible, spaced-out times instead of all landing in one second."""

    def __init__(self, start: datetime) -> None:
        self._t = start

    def now(self) -> datetime:
        self._t = self._t + timedelta(minutes=7)
        return self._t

"""The Studio Chat's Stop while the model has not written yet, against a one-slot llama.cpp server (``n_parallel=1``).

A turn sends a long message (about 2,000 tokens, which llama.cpp takes a while to read; another in each round, so
no round reads it from llama.cpp's prompt cache) and asks for a 600-token
story; Stop is pressed 0.3 s after sending, while the server still reads the prompt (no text yet). Prints how long
the turn took to end after Stop, how long a short turn took right after (on the same one-slot server) and alone,
and whether the stopped turn left anything in its thread. With Stop shutting the model call's connection the turn
ends at once and the next turn does not wait; with a Stop that only took effect at the next text delta, the turn
ends at the first token and the server keeps the slot until then. ``core`` and ``studio`` come from
``PYTHONPATH``, so the same script measures another tree (a ``git archive`` of main) too. Needs llama.cpp's server
from ``xllamacpp`` and SmolLM2-135M (see ``bench/om_yield_llm.py``); skips (exit 0) when they are absent:

    PYTHONPATH=$PWD .venv/bin/python bench/chat_stop_llm.py LLM_PYTHON GGUF [ROUNDS]
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# bench/studio.py (another benchmark) would shadow the ``studio`` package: this folder goes last on the path, where
# only ``llm_requests`` (the llama.cpp launcher; no ``core`` import) is taken from it.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]

from core import open_store  # noqa: E402
from core.llm import OpenAICompatibleModel, RetryPolicy  # noqa: E402
from studio import chat_runner  # noqa: E402
from studio.chat_runner import ChatRequest  # noqa: E402
from llm_requests import start_llama  # noqa: E402

LONG = " ".join(f"Fact {i}: the dragon's hoard held {i * 7} coins and {i % 13} cups." for i in range(100))


def new_stop() -> Any:
    make = getattr(chat_runner, "turn_stop", None)
    return make() if make is not None else threading.Event()  # (main before the change: an Event)


def press(stop: Any) -> None:
    if isinstance(stop, threading.Event):
        stop.set()
    else:
        stop.stop(chat_runner.STOP_REASON)


def turn(store: Any, model: Any, thread: str, text: str, cap: int, stop: Any = None) -> tuple[str, float]:
    req = ChatRequest(thread, "ada", text, None, "Be brief." if cap < 100 else "You write long stories.",
                      f"u-{thread}", new_thread=True, max_tokens=cap, model_settings={"temperature": 0})
    start = time.perf_counter()
    try:
        chat_runner.run_turn(store, req, model, embedder=lambda: None, on_delta=lambda _p: None, stop=stop)
        return "answered", time.perf_counter() - start
    except chat_runner.TurnStopped:
        return "stopped", time.perf_counter() - start


def main() -> int:
    llm_python, gguf = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    if not Path(llm_python).exists() or not Path(gguf).exists():
        print(f"skipped: {llm_python} or {gguf} is absent (see the docstring)")
        return 0
    proc, port = start_llama(llm_python, gguf)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(Path(tmp) / "m.db")
            model = OpenAICompatibleModel("smollm2-135m", base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                          api_key_env=None, keyring_service=None, timeout=300,
                                          retry=RetryPolicy(max_retries=0))
            print(f"a short turn alone: {turn(store, model, 'warm', 'Say hello.', 16)[1]:.2f} s")
            for n in range(rounds):
                stop = new_stop()
                timer = threading.Timer(0.3, lambda: (pressed.append(time.perf_counter()), press(stop)))
                pressed: list[float] = []
                timer.start()
                ask = f"Dragon {n}. {LONG}\n\nWrite a very long story about this dragon."
                how, _took = turn(store, model, f"long-{n}", ask, 600, stop)
                ended = time.perf_counter()
                timer.join()
                after = ended - pressed[0] if pressed else float("nan")
                _, short = turn(store, model, f"short-{n}", "Say hello.", 16)
                kept = store.memory.get_thread(f"long-{n}") is not None
                print(f"round {n + 1}: the long turn {how}, {after:.2f} s after Stop; the next short turn "
                      f"{short:.2f} s; the stopped turn's thread {'STORED' if kept else 'absent'}")
            model.close()
            store.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

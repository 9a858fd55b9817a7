"""What a stoppable model call costs: a connection of its own against the pooled, kept-alive one.

A gateway turn's model call to a server on this machine goes out on a connection of its own (no keep-alive), so
it can be shut down when the client leaves (``core.llm.stopping``). This times plain ``generate`` calls against a
local keep-alive server (uvicorn, one fixed completion, like llama.cpp's HTTP/1.1 server), armed and not,
alternated in rounds, and prints the medians.

    PYTHONPATH=. .venv/bin/python bench/stoppable_calls.py [--calls 300] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.gateway import GatewayServer
from core.llm import OpenAICompatibleModel
from core.llm.stopping import CallStop, armed

COMPLETION = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


async def completions(request: Request) -> JSONResponse:
    await request.body()
    return JSONResponse(COMPLETION)


def timed(model: OpenAICompatibleModel, calls: int, stoppable: bool) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        if stoppable:
            with armed(CallStop()):
                model.generate([{"role": "user", "content": "hi"}])
        else:
            model.generate([{"role": "user", "content": "hi"}])
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    with GatewayServer(app) as server:
        model = OpenAICompatibleModel("m", base_url=server.url + "/v1", api_key="x")
        timed(model, 20, False), timed(model, 20, True)  # warm both clients
        for round_ in range(args.rounds):
            order = (False, True) if round_ % 2 == 0 else (True, False)
            for stoppable in order:
                times = timed(model, args.calls, stoppable)
                print(f"round {round_ + 1} {'own connection (stoppable)' if stoppable else 'pooled (kept alive)':27} "
                      f"p50 {statistics.median(times):.3f} ms  p90 {statistics.quantiles(times, n=10)[-1]:.3f} ms")
        model.close()


if __name__ == "__main__":
    main()

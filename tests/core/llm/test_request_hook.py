"""The request hook both the OpenAI-compatible model and the Agents SDK capture read their bytes with."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import httpx2

from core.llm.request_hook import RequestWatch

_PATH = "/v1/chat/completions"


class _Call:
    def __init__(self, http: Any, fail: bool = False) -> None:
        self.http, self.fail = http, fail
        self.raw: list[bytes] = []
        self.unread_count = 0

    def takes(self, http: Any) -> bool:
        return http is self.http

    def sent(self, request: Any, raw: bytes, path: str) -> None:
        if self.fail:
            raise ValueError("a call that cannot take its body")
        assert path == "/chat/completions"
        self.raw.append(raw)

    def unread(self) -> None:
        self.unread_count += 1


class _Owner:
    """What an OpenAI client is to the hook: something holding an httpx client as ``_client``."""

    def __init__(self, http: Any) -> None:
        self._client = http


def _answer(request: Any) -> Any:
    return httpx2.Response(200, json={"ok": True})


def _watch() -> RequestWatch[_Call]:
    armed: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("test_armed", default=None)
    return RequestWatch(armed, ("/chat/completions",), "could not read %s")


def test_the_armed_call_gets_its_bytes_and_no_other_request_is_read() -> None:
    watch = _watch()
    with httpx2.Client(transport=httpx2.MockTransport(_answer), base_url="http://model") as http, \
            httpx2.Client(transport=httpx2.MockTransport(_answer), base_url="http://other") as other:
        assert watch.watch(_Owner(http)) is http
        assert watch.watch(_Owner(http)) is http  # added once
        assert len(http.event_hooks["request"]) == 1
        watch.watch(_Owner(other))
        http.post(_PATH, content=b'{"unarmed":1}')  # no call armed: not read
        call = _Call(http)
        token = watch.armed.set(call)
        try:
            http.post(_PATH, content=b'{"a":1}')
            http.get(_PATH)  # not a POST
            http.post("/v1/models", content=b"{}")  # not a watched path
            other.post(_PATH, content=b'{"other":1}')  # another client's request
        finally:
            watch.armed.reset(token)
    assert call.raw == [b'{"a":1}']


def test_a_call_that_cannot_take_its_request_never_fails_it() -> None:
    watch = _watch()
    with httpx2.Client(transport=httpx2.MockTransport(_answer), base_url="http://model") as http:
        watch.watch(_Owner(http))
        call = _Call(http, fail=True)
        token = watch.armed.set(call)
        try:
            assert http.post(_PATH, content=b"{}").json() == {"ok": True}
        finally:
            watch.armed.reset(token)
    assert call.raw == [] and call.unread_count == 1


def test_an_async_client_gets_an_awaited_hook_and_each_task_sees_its_own_call() -> None:
    watch = _watch()

    async def run() -> list[_Call]:
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(_answer), base_url="http://model") as http:
            assert watch.watch(_Owner(http)) is http

            async def one(n: int) -> _Call:
                call = _Call(http)
                watch.armed.set(call)  # a task's own context: the other task does not see it
                await http.post(_PATH, content=b'{"n":%d}' % n)
                return call

            return list(await asyncio.gather(one(1), one(2)))

    first, second = asyncio.run(run())
    assert first.raw == [b'{"n":1}'] and second.raw == [b'{"n":2}']

"""Hostile clients against the gateway, the MCP server and import: holes found by an adversarial pass,
each reproduced against a running server or a real file."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from core.gateway.guard import GuardPolicy, RequestGuard


def _request(url: str, method: str, path: str, body: str | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


# -- the request guard --------------------------------------------------------------------------------


def test_an_options_request_without_origin_needs_the_token():
    """Only a CORS preflight (which browsers always send with Origin) goes without the token; an OPTIONS
    that merely carries Access-Control-Request-Method is an ordinary request and must not reach the app
    unauthenticated (the MCP transport, for one, opens a session for it)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from core.gateway.server import GatewayServer

    reached: list[str] = []

    async def rpc(request: Request) -> JSONResponse:
        reached.append(request.method)
        return JSONResponse({"secret": "only for token holders"})

    app = RequestGuard(Starlette(routes=[Route("/rpc", rpc, methods=["OPTIONS", "POST"])]),
                       GuardPolicy(token="t", allowed_origins=frozenset({"https://app.test"})))
    with GatewayServer(app) as server:
        status, _, body = _request(server.url, "OPTIONS", "/rpc", headers={"Access-Control-Request-Method": "POST"})
        assert status == 401 and b"secret" not in body
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
        # A real preflight from a listed origin is still answered by the guard, without the token.
        status, headers, _ = _request(server.url, "OPTIONS", "/rpc", headers={
            "Origin": "https://app.test", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert status == 204 and headers["access-control-allow-origin"] == "https://app.test"
        # With the token, an OPTIONS reaches the app as any request does.
        status, _, _ = _request(server.url, "OPTIONS", "/rpc", headers={"Authorization": "Bearer t"})
        assert status == 200
    assert reached == ["OPTIONS"]

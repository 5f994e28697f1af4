"""Test-only HTTP apps for the backend tests (real servers on 127.0.0.1)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


def dead_url() -> str:
    """A 127.0.0.1 URL nothing listens on (a port just released by the OS)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def raw_app(handler: Callable[[dict[str, Any], Request], Any]) -> FastAPI:
    """An endpoint that answers chat completions with whatever `handler(body, request)` returns."""
    app = FastAPI()
    app.state.bodies = []

    @app.post("/v1/chat/completions")
    async def completions(request: Request):
        body = await request.json()
        app.state.bodies.append(body)
        result = handler(body, request)
        return result if isinstance(result, JSONResponse) else JSONResponse(result)

    return app


def completion(
    message: dict[str, Any], usage: dict[str, int] | None = None, model: str = "raw"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = {**usage, "total_tokens": sum(usage.values())}
    return body

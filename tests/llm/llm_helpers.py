"""Test-only HTTP apps and fault injection for the backend tests (real servers on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import hashlib
import random
import socket
from collections import Counter
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


class FaultInjector:
    """Test-only middleware state: fails a seeded fraction of chat calls with 429/500/delays.

    `per_call` caps how often one call (one request body) is failed, so a client with more retries
    than that always gets through on what is injected: a test of retries then cannot fail by the
    luck of the draw. `None` leaves calls uncapped (a server that always fails).
    """

    def __init__(
        self,
        p429: float = 0.0,
        p500: float = 0.0,
        p_delay: float = 0.0,
        delay_s: float = 0.0,
        seed: int = 0,
        per_call: int | None = None,
    ):
        self.p429, self.p500, self.p_delay, self.delay_s = p429, p500, p_delay, delay_s
        self.rng = random.Random(seed)
        self.per_call = per_call
        self.failed_calls: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.auth_headers: list[str] = []

    def install(self, app: FastAPI) -> FastAPI:
        @app.middleware("http")
        async def inject(request: Request, call_next):
            if request.url.path != "/v1/chat/completions":
                return await call_next(request)
            self.auth_headers.append(request.headers.get("authorization", ""))
            self.counts["requests"] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                call = hashlib.sha256(await request.body()).hexdigest()
                capped = self.per_call is not None and self.failed_calls[call] >= self.per_call
                roll = 1.0 if capped else self.rng.random()
                if roll < self.p429 + self.p500 + self.p_delay:
                    self.failed_calls[call] += 1
                if roll < self.p429:
                    self.counts["429"] += 1
                    return JSONResponse({"error": {"message": "slow down"}}, status_code=429)
                if roll < self.p429 + self.p500:
                    self.counts["500"] += 1
                    return JSONResponse({"error": {"message": "boom"}}, status_code=500)
                if roll < self.p429 + self.p500 + self.p_delay:
                    self.counts["delay"] += 1
                    await asyncio.sleep(self.delay_s)
                self.counts["passed"] += 1
                return await call_next(request)
            finally:
                self.in_flight -= 1

        return app


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

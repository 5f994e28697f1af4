"""Faults an OpenAI-compatible server can show its clients, injected by a middleware (real HTTP).

Used by the backend's retry tests and by rollout collection against flaky endpoints.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import Counter

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


class FaultInjector:
    """Middleware state that fails a seeded fraction of chat calls with a 429, a 500 or a delay.

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

    def reset(self) -> None:
        """Forget which calls were failed: every call's allowance is whole again (a new test)."""
        self.failed_calls.clear()

    def install(self, app: FastAPI) -> FastAPI:
        @app.middleware("http")
        async def inject(request: Request, call_next):
            if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
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

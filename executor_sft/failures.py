"""One classification of failures, shared by every backend, retriever and tool: whose failure is it?

*Infrastructure*: what an episode runs on failed (a timeout, a refused or dropped connection, a
5xx, 408/409/425/429, a 200 whose body is not an answer, our own disk). It says nothing about the
episode, so it is retried within the call, then raised: the episode is not stored, its attempt
goes to the attempts log, and a resume runs it again (up to `max_attempts` in all).

A wrong set-up (401 for a bad key, 404 for a wrong model name or URL) is infrastructure too,
but not worth another attempt within the call.

*The episode's own outcome*: the request itself was refused (400, 413, 414, 422: a prompt over
the context length, an oversized argument). The same request would be refused again,
so it is recorded once, as the run's finish, and never retried.

Anything else a tool raises is that tool's failure on this run (recorded, finish "error"); a
bug elsewhere keeps its traceback.
"""

from __future__ import annotations

from typing import Literal

import httpx

RETRYABLE_4XX = frozenset({408, 409, 425, 429})
"""Client-error statuses that mean "not now" (timeout, conflict, too early, rate limit), not "never"."""

REFUSED_4XX = frozenset({400, 413, 414, 422})
"""Client-error statuses about this request's content (a prompt over the context length, a body
or argument too large, a value out of range): the episode's own outcome."""

Kind = Literal["ok", "retry", "setup", "outcome"]


class InfrastructureError(RuntimeError):
    """An endpoint, server or file the episode runs on failed past its retries."""


class RequestRefused(RuntimeError):
    """The server refused this request (a non-retryable 4xx): the episode's own outcome."""


INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (InfrastructureError, OSError, httpx.TransportError)
"""What propagates out of an episode instead of being recorded (`OSError` covers our disk and
the standard library's timeouts and connection errors; `httpx.TransportError` httpx's own)."""

TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.TransportError, OSError)
"""Failures of one HTTP attempt that another attempt may not meet (retried within the call)."""


def status_kind(status: int) -> Kind:
    """What an HTTP status says about a request.

    "retry": infrastructure, retried within the call (5xx, `RETRYABLE_4XX`); "setup":
    infrastructure that another attempt would meet again (any other 4xx, e.g. 401 for a wrong
    key, 404 for a wrong model or URL), raised at once, so the episode is not stored and the
    run stops on failures in a row; "outcome": the episode's own (`REFUSED_4XX`)."""
    if status < 400:
        return "ok"
    if status >= 500 or status in RETRYABLE_4XX:
        return "retry"
    return "outcome" if status in REFUSED_4XX else "setup"

"""URLs a user writes in a config (model endpoints, a retrieval server): checked when the config
is read, so a typo is a config error naming the field, and shown without their password, so an
error line or a log never echoes a secret written as `http://user:password@host`."""

from __future__ import annotations

import re

_PASSWORD = re.compile(r"(?<=//)([^/@:\s]*):[^/@\s]*@")


def redact(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` in it replaced by `***`."""
    return _PASSWORD.sub(r"\1:***@", text)


def check_url(url: str) -> str:
    """`url` when it is an http(s) URL with a host; else `ValueError` saying what is wrong."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        reason = str(exc)
    else:
        if parsed.scheme in ("http", "https") and parsed.host:
            return url
        reason = "not http:// or https://" if parsed.scheme not in ("http", "https") else "no host"
    raise ValueError(f"{redact(url)} is not a URL ({redact(reason)}); write it as http://HOST:PORT/...")

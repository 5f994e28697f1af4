"""URLs a user writes in a config (model endpoints, a retrieval server): checked when the config
is read, so a typo is a config error naming the field, and shown without their password, so an
error line or a log never echoes a secret written as `http://user:password@host`."""

from __future__ import annotations

import logging
import re

_PASSWORD = re.compile(r"(?<=//)([^/@:\s]*):[^/@\s]*@")


def redact(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` in it replaced by `***`."""
    return _PASSWORD.sub(r"\1:***@", text)


HTTP_LOGGERS = ("httpx", "httpx2", "openai._base_client")  # httpx2: what openai 3 sends with


class RedactPasswords(logging.Filter):
    """Redacts URL passwords from a record's message: httpx and openai log request URLs whole."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "@" in message:
            record.msg, record.args = redact(message), None
        return True


def hide_passwords_in_http_logs() -> None:
    """Installs `RedactPasswords` on the loggers that print request URLs (idempotent; a logger's
    filters see only its own records, so each is named)."""
    for name in HTTP_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, RedactPasswords) for f in log.filters):
            log.addFilter(RedactPasswords())


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

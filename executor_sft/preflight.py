"""Refuse a run that cannot succeed before any model loads or any episode starts.

A run names models and a retriever in one or more config files. Each part is checked for a
placeholder left in (`SET-THIS`, as the paper configs ship their hosts), for what its own
`preflight()` reports (an API key variable that is not set, weights that are not here, an index
not built), and for endpoints that do not answer an HTTP GET (`/v1/models` of a model server,
`/health` of a retrieval server), and for what the run's own input checks refuse (a questions
file's bad row, an output folder that cannot be written). Every problem is one line naming the file, the key and the fix,
and all of them are reported at once (`PreflightError`), so a user fixes a config in one pass
instead of one launch per mistake.

Endpoints are probed concurrently with a short timeout: any HTTP answer (a 401 from a hosted API
without its key included) counts as answering; only no answer at all is a problem.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from executor_sft.errors import PreflightError, UserError
from executor_sft.urls import redact

PLACEHOLDER = "SET-THIS"
"""What the shipped configs put where a user must fill in a value (a host, a path)."""
PROBE_TIMEOUT_S = 5.0


class Checked(Protocol):
    """A config part the preflight understands (`ChatModelConfig`, `RetrieverConfig`)."""

    def preflight(self) -> list[tuple[str, str]]: ...

    def endpoints(self) -> list[tuple[str, str]]: ...

    def model_dump(self, **kwargs: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Part:
    """One checked part of a run: the file it was read from, its key there, its config."""

    where: str
    key: str
    config: Checked

    def line(self, field: str, what: str) -> str:
        return f"{self.where}: {self.key}.{field}: {what}"


def problems(parts: Iterable[Part], timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """Every problem of `parts`, one line each, in the parts' order, duplicates dropped."""
    parts = list(parts)
    found: list[list[str]] = [[] for _ in parts]
    probes: list[tuple[int, str, str]] = []
    for i, part in enumerate(parts):
        held = _placeholders(part.config.model_dump(mode="json"))
        found[i] += [part.line(field, f"{value} is a placeholder; set it") for field, value in held]
        found[i] += [part.line(field, what) for field, what in part.config.preflight()]
        probes += [
            (i, field, url) for field, url in part.config.endpoints() if PLACEHOLDER not in url.upper()
        ]
    if probes:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(probes))) as pool:
            answers = pool.map(lambda probe: _unanswered(probe[2], timeout_s), probes)
            for (i, field, url), reason in zip(probes, answers, strict=True):
                if reason is not None:
                    found[i].append(
                        parts[i].line(
                            field,
                            redact(f"GET {url} got no answer ({reason}); start the server or fix the URL"),
                        )
                    )
    return list(dict.fromkeys(line for lines in found for line in lines))


def check(
    parts: Iterable[Part], timeout_s: float = PROBE_TIMEOUT_S, inputs: Iterable[Callable[[], object]] = ()
) -> str:
    """Raise `PreflightError` listing every problem of `parts` and of the run's own input checks
    (`inputs`: each raises a `UserError`, e.g. a questions file's bad row); else the line that says so.

    An input check's line that a part's line already says (a missing questions file) is dropped."""
    parts = list(parts)
    lines = problems(parts, timeout_s)
    for step in inputs:
        try:
            step()
        except UserError as exc:
            lines += [line for line in exc.lines() if not any(line in found for found in lines)]
    if lines:
        raise PreflightError(lines)
    probed = sum(len(part.config.endpoints()) for part in parts)
    return f"preflight: {len(parts)} config parts checked, {probed} endpoints answered; nothing is missing"


def check_config(config: Any, where: str, *inputs: Callable[[], object]) -> str:
    """`check` over `config.preflight_parts(where)` (eval, sweep and collection configs have it)
    and the run's own input checks `inputs`."""
    return check(config.preflight_parts(where), inputs=inputs)


def model_parts(where: str, prefix: str, models: dict[str, Any]) -> list[Part]:
    """A `Part` per model of a `{role: ChatModelConfig}` mapping found under `prefix` in `where`."""
    return [Part(where, f"{prefix}.{role}", config) for role, config in models.items()]


def _placeholders(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(dotted field, value) of every string in a dumped config that still holds a placeholder."""
    if isinstance(value, str):
        return [(path, value)] if PLACEHOLDER in value.upper() else []
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in _placeholders(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [hit for item in value for hit in _placeholders(item, path)]
    return []


def _unanswered(url: str, timeout_s: float) -> str | None:
    """None when `url` gives any HTTP answer to a GET, else why it gave none."""
    import httpx

    try:
        httpx.get(url, timeout=timeout_s)
    except httpx.TimeoutException:
        return f"no answer in {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"[:160]
    return None

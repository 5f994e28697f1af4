"""Per-run predicates: correctness, counterfactual role, malformed (corrected) turns.

Correctness is the typed record's own rule (`ExecutorRun.correctness_failure`). The functions
here also take a run as a plain dict (read as the filter reads it, `parse_run`), so custom
pipelines and collection can call them on records they loaded themselves.
"""

from __future__ import annotations

import re
from typing import Any

from executor_sft.agents.tools import OPEN_DOCUMENT_TOOL_NAME, SEARCH_TOOL_NAME
from executor_sft.filters.records import parse_run
from executor_sft.llm.parsing import parse_tool_call
from executor_sft.schema import ExecutorRun, Message

_TAG_SEARCH = re.compile(r"<search>.*?</search>", re.S | re.I)


def correctness_failure(
    run: ExecutorRun | dict[str, Any], require_judge: bool = True, min_em: float = 1.0
) -> str | None:
    """`ExecutorRun.correctness_failure` of a run record or dict."""
    return parse_run(run).correctness_failure(require_judge, min_em)


def is_correct(run: ExecutorRun | dict[str, Any], require_judge: bool = True, min_em: float = 1.0) -> bool:
    """`ExecutorRun.is_correct` of a run record or dict."""
    return parse_run(run).is_correct(require_judge, min_em)


def is_counterfactual(run: ExecutorRun | dict[str, Any], budget1_role: str = "teacher_budget1") -> bool:
    """A budget-1 re-run (by role or by `counterfactual_of`); these are never training rows."""
    run = parse_run(run)
    return run.role == budget1_role or run.counterfactual_of is not None


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _queries_asked(call: Any) -> int | None:
    """How many searches a well-formed built-in call asks for (0: the access tool); None: malformed.
    `search` takes `query` or, as `search_many`, a `queries` list."""
    parsed = parse_tool_call(call)
    args = parsed.arguments if parsed is not None else None  # a string that is not JSON stays a string
    if not isinstance(args, dict):
        return None
    if parsed.name == OPEN_DOCUMENT_TOOL_NAME:
        return 0 if _text(args.get("doc_id")) else None
    if parsed.name != SEARCH_TOOL_NAME:
        return None
    if "queries" in args:
        queries = args["queries"]
        ok = isinstance(queries, list) and bool(queries) and all(_text(q) for q in queries)
        return len(queries) if ok else None
    return 1 if _text(args.get("query")) else None


def _searches_asked(msg: Message) -> int:
    calls = msg.get("tool_calls") or []
    if calls:
        return sum(_queries_asked(c) or 0 for c in calls)
    return 1 if _TAG_SEARCH.search(msg.get("content") or "") else 0


def malformed_turn(messages: list[Message]) -> int | None:
    """Index of the first malformed assistant turn (one the runtime had to correct), or None.

    Read from the messages themselves, so it works for any writer: a turn is malformed when it
    calls a tool other than the built-in `search` (with a non-empty `query`, or a `queries`
    list of non-empty strings) and `open_document` (with a non-empty `doc_id`), or passes
    arguments that are not such a JSON object (any of a turn's parallel calls), or when a non-final assistant turn neither calls a
    tool nor contains a `<search>...</search>` tag (tag protocol), i.e. it stopped without a report.
    """
    last = len(messages) - 1
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        calls = msg.get("tool_calls") or []
        if calls:
            if any(_queries_asked(c) is None for c in calls):
                return i
        elif i != last and not _TAG_SEARCH.search(msg.get("content") or ""):
            return i
    return None


def needs_correction(run: ExecutorRun | dict[str, Any]) -> bool:
    """True when the run needed a corrective message.

    Any of: the writer recorded `n_corrections > 0`; a malformed turn (see `malformed_turn`);
    or more searches asked (one per query, parallel calls included) than `n_searches` (a
    well-formed call the runtime refused, e.g. one made after the search budget was spent).
    """
    run = parse_run(run)
    if run.n_corrections:
        return True
    messages = [m for m in run.messages or [] if isinstance(m, dict)]
    if malformed_turn(messages) is not None:
        return True
    asked = sum(_searches_asked(m) for m in messages if m.get("role") == "assistant")
    return asked > run.n_searches

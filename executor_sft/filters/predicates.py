"""Per-run predicates: correctness, counterfactual role, malformed (corrected) turns.

Correctness is the typed record's own rule (`ExecutorRun.correctness_failure`). The functions
here also take a run as a plain dict (read as the filter reads it, `parse_run`), so custom
pipelines and collection can call them on records they loaded themselves.
"""

from __future__ import annotations

import re
from typing import Any

from executor_sft.agents.tools import SEARCH_TOOL_NAME
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


def _valid_search_call(call: Any) -> bool:
    parsed = parse_tool_call(call)
    if parsed is None or parsed.name != SEARCH_TOOL_NAME:
        return False
    args = parsed.arguments  # a string that is not JSON stays a string
    return isinstance(args, dict) and isinstance(args.get("query"), str) and bool(args["query"].strip())


def _is_search_turn(msg: Message) -> bool:
    return bool(msg.get("tool_calls")) or bool(_TAG_SEARCH.search(msg.get("content") or ""))


def malformed_turn(messages: list[Message]) -> int | None:
    """Index of the first malformed assistant turn (one the runtime had to correct), or None.

    Read from the messages themselves, so it works for any writer: a turn is malformed when it
    makes more than one tool call, calls an unknown tool, or passes arguments that are not a
    JSON object with a non-empty `query`, or when a non-final assistant turn neither calls a
    tool nor contains a `<search>...</search>` tag (tag protocol), i.e. it stopped without a report.
    """
    last = len(messages) - 1
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        calls = msg.get("tool_calls") or []
        if calls:
            if len(calls) != 1 or not _valid_search_call(calls[0]):
                return i
        elif i != last and not _TAG_SEARCH.search(msg.get("content") or ""):
            return i
    return None


def needs_correction(run: ExecutorRun | dict[str, Any]) -> bool:
    """True when the run needed a corrective message.

    Any of: the writer recorded `n_corrections > 0`; a malformed turn (see `malformed_turn`);
    or more search turns than `n_searches` (a well-formed call the runtime refused, e.g. one
    made after the search budget was spent).
    """
    run = parse_run(run)
    if run.n_corrections:
        return True
    messages = [m for m in run.messages or [] if isinstance(m, dict)]
    if malformed_turn(messages) is not None:
        return True
    search_turns = sum(1 for m in messages if m.get("role") == "assistant" and _is_search_turn(m))
    return search_turns > run.n_searches

"""Per-run predicates: correctness, counterfactual role, malformed (corrected) turns.

Each takes a run as a dict, an `ExecutorRun`, or a `RunView`, so custom pipelines can call
them directly on records they loaded themselves.
"""

from __future__ import annotations

import re
from typing import Any

from executor_sft.agents.tools import SEARCH_TOOL_NAME
from executor_sft.filters.records import RunView
from executor_sft.llm.parsing import parse_tool_call
from executor_sft.schema import Message

_TAG_SEARCH = re.compile(r"<search>.*?</search>", re.S | re.I)


def _view(run: Any) -> RunView:
    return run if isinstance(run, RunView) else RunView.parse(run)


def correctness_failure(run: Any, require_judge: bool = True, min_em: float = 1.0) -> str | None:
    """Why a run is not correct (`not_report`, `no_outcome`, `wrong_em`, `judge_null`, `judge_false`), or None.

    Correct = finished with a report, `outcome.em >= min_em` (EM is 0/1, so == 1 by default) and,
    when `require_judge`, `outcome.judge is True` (a null judge does not count).
    """
    r = _view(run)
    if r.finish != "report":
        return "not_report"
    if not r.has_outcome:
        return "no_outcome"
    if r.em < min_em:
        return "wrong_em"
    if require_judge:
        if r.judge is None:
            return "judge_null"
        if r.judge is not True:
            return "judge_false"
    return None


def is_correct(run: Any, require_judge: bool = True, min_em: float = 1.0) -> bool:
    """finish == "report" and outcome.em == 1 and (outcome.judge is True when `require_judge`)."""
    return correctness_failure(run, require_judge, min_em) is None


def is_counterfactual(run: Any, budget1_role: str = "teacher_budget1") -> bool:
    """A budget-1 re-run (by role or by `counterfactual_of`); these are never training rows."""
    r = _view(run)
    return r.role == budget1_role or r.counterfactual_of is not None


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


def needs_correction(run: Any) -> bool:
    """True when the run needed a corrective message.

    Any of: the writer recorded `n_corrections > 0`; a malformed turn (see `malformed_turn`);
    or more search turns than `n_searches` (a well-formed call the runtime refused, e.g. one
    made after the search budget was spent).
    """
    r = _view(run)
    if r.n_corrections:
        return True
    messages = [m for m in r.messages or [] if isinstance(m, dict)]
    if malformed_turn(messages) is not None:
        return True
    search_turns = sum(1 for m in messages if m.get("role") == "assistant" and _is_search_turn(m))
    return search_turns > r.n_searches

"""Collection statistics: tokens per role, searches per invocation (paper Table 4), errors."""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from executor_sft.agents.tools import OPEN_DOCUMENT_TOOL_NAME
from executor_sft.llm.parsing import parse_tool_call
from executor_sft.schema import Episode


@dataclass
class RoleStats:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    runs: int = 0
    searches: Counter = field(default_factory=Counter)
    """Executor runs by number of searches: "0", "1", ">=2"."""
    finish: Counter = field(default_factory=Counter)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class InvocationStats:
    """One executor role's own invocations (counterfactual re-runs excluded), as the paper's Tab. 4."""

    invocations: int = 0
    searches: int = 0
    one: int = 0
    two_plus: int = 0
    turns: int = 0
    parallel_turns: int = 0
    """Turns that made several tool calls (or one `search` with several queries)."""
    access_calls: int = 0
    """Calls of the access tool (`open_document`), WideSeek-R1's second tool beside search."""

    def to_dict(self) -> dict[str, Any]:
        """Turns are reported once some turn ran several searches (docs/agents.md, "Parallel tool
        calls"): before that, turns are searches + 1 and single-call summaries stay as they were."""
        n = self.invocations
        out: dict[str, Any] = {
            "invocations": n,
            "searches": self.searches,
            "searches_per_invocation": self.searches / n if n else 0.0,
            "share_1_search": self.one / n if n else 0.0,
            "share_2plus_searches": self.two_plus / n if n else 0.0,
        }
        if self.parallel_turns:
            out["turns"] = self.turns
            out["turns_per_invocation"] = self.turns / n if n else 0.0
            out["parallel_tool_turns"] = self.parallel_turns
        if self.access_calls:
            # Reported once the access tool was used, so summaries without it stay as they were.
            # The share: access calls / (access calls + searches), a search counting once per query.
            calls = self.access_calls + self.searches
            out["access_calls"] = self.access_calls
            out["access_call_share"] = self.access_calls / calls if calls else 0.0
        return out


def _add_counts(ours: RoleStats | InvocationStats, theirs: RoleStats | InvocationStats) -> None:
    """Add `theirs` into `ours` field by field: these stats hold only counts (numbers and Counters),
    so merging disjoint episodes' stats is addition, and a count added later merges too."""
    for f in fields(ours):
        count = getattr(ours, f.name)
        if isinstance(count, Counter):
            count.update(getattr(theirs, f.name))
        else:
            setattr(ours, f.name, count + getattr(theirs, f.name))


@dataclass
class CollectionStats:
    episodes: int = 0
    questions: set[str] = field(default_factory=set)
    roles: dict[str, RoleStats] = field(default_factory=lambda: defaultdict(RoleStats))
    stop_reasons: Counter = field(default_factory=Counter)
    episode_errors: int = 0
    counterfactuals: int = 0
    invocations: dict[str, InvocationStats] = field(default_factory=lambda: defaultdict(InvocationStats))
    drivers: Counter = field(default_factory=Counter)
    """Episodes per driving role in separate collection (`Episode.driver`); empty in shadow mode."""

    def add(self, episode: Episode) -> None:
        self.episodes += 1
        self.questions.add(episode.question.id)
        self.stop_reasons[episode.stop_reason] += 1
        self.episode_errors += episode.error is not None
        if episode.driver is not None:
            self.drivers[episode.driver] += 1
        for role, usage in episode.usage.items():
            stats = self.roles[role]
            stats.prompt_tokens += usage.prompt_tokens
            stats.completion_tokens += usage.completion_tokens
            stats.calls += usage.calls
        for run in episode.runs:
            stats = self.roles[run.role]
            stats.runs += 1
            stats.searches["0" if run.n_searches == 0 else "1" if run.n_searches == 1 else ">=2"] += 1
            stats.finish[run.finish] += 1
            self.counterfactuals += run.counterfactual_of is not None
            if run.counterfactual_of is None:
                inv = self.invocations[run.role]
                inv.invocations += 1
                inv.searches += run.n_searches
                inv.one += run.n_searches == 1
                inv.two_plus += run.n_searches >= 2
                inv.turns += run.n_turns
                inv.parallel_turns += _parallel_turns(run.messages)
                inv.access_calls += _access_calls(run.messages)

    def merge(self, other: CollectionStats) -> None:
        """Add the stats of disjoint episodes (another worker's file) to these."""
        self.episodes += other.episodes
        self.questions |= other.questions
        self.stop_reasons.update(other.stop_reasons)
        self.episode_errors += other.episode_errors
        self.counterfactuals += other.counterfactuals
        self.drivers.update(other.drivers)
        for role, theirs in other.invocations.items():
            _add_counts(self.invocations[role], theirs)
        for role, theirs in other.roles.items():
            _add_counts(self.roles[role], theirs)

    def to_dict(self) -> dict[str, Any]:
        n_questions = max(1, len(self.questions))
        roles = {}
        for role, s in sorted(self.roles.items()):
            invoked = sum(s.searches.values())
            roles[role] = {
                "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.completion_tokens,
                "tokens_per_question": s.tokens / n_questions,
                "calls": s.calls,
                "runs": s.runs,
                "searches_per_invocation": {
                    k: {"runs": s.searches[k], "share": s.searches[k] / invoked if invoked else 0.0}
                    for k in ("0", "1", ">=2")
                },
                "finish": dict(s.finish),
            }
        summary = {
            "episodes": self.episodes,
            "questions": len(self.questions),
            "stop_reasons": dict(self.stop_reasons),
            "episode_errors": self.episode_errors,
            "counterfactual_runs": self.counterfactuals,
            "roles": roles,
            "executor_invocations": {role: s.to_dict() for role, s in sorted(self.invocations.items())},
        }
        if self.drivers:
            summary["episodes_per_driver"] = dict(sorted(self.drivers.items()))
        return summary


def _parallel_turns(messages: list[dict[str, Any]]) -> int:
    def several(message: dict[str, Any]) -> bool:
        calls = message.get("tool_calls") or []
        if len(calls) > 1:
            return True
        parsed = parse_tool_call(calls[0]) if calls and isinstance(calls[0], dict) else None
        arguments = parsed.arguments if parsed is not None else None
        return (
            isinstance(arguments, dict)
            and isinstance(arguments.get("queries"), list)
            and len(arguments["queries"]) > 1
        )

    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant" and several(m))


def _access_calls(messages: list[dict[str, Any]]) -> int:
    """The access-tool calls of a run's assistant turns."""
    n = 0
    for m in messages:
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or []:
            parsed = parse_tool_call(call) if isinstance(call, dict) else None
            n += parsed is not None and parsed.name == OPEN_DOCUMENT_TOOL_NAME
    return n


def collection_stats(episodes: Iterable[Episode]) -> CollectionStats:
    stats = CollectionStats()
    for episode in episodes:
        stats.add(episode)
    return stats


def render_summary(summary: dict[str, Any]) -> str:
    """A plain-text table of `CollectionStats.to_dict()` for the console and logs."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['episodes']} episodes over {summary['questions']} questions")
    for col in ("role", "runs", "tokens/question", "calls", "0 search", "1 search", ">=2 searches", "finish"):
        table.add_column(col, justify="right" if col != "role" and col != "finish" else "left")
    for role, r in summary["roles"].items():
        s = r["searches_per_invocation"]
        searches = [f"{s[k]['runs']} ({s[k]['share']:.0%})" if r["runs"] else "-" for k in ("0", "1", ">=2")]
        finish = ", ".join(f"{k}={v}" for k, v in sorted(r["finish"].items())) or "-"
        table.add_row(
            role, str(r["runs"]), f"{r['tokens_per_question']:.0f}", str(r["calls"]), *searches, finish
        )
    console = Console(width=140, record=True, file=io.StringIO())
    console.print(table)
    invocations = summary.get("executor_invocations")
    if invocations:
        tab4 = Table(title="executor invocations (paper Tab. 4; counterfactual re-runs excluded)")
        access = any("access_call_share" in r for r in invocations.values())
        columns = ["role", "invocations", "searches/invocation", "1 search", ">=2 searches"]
        for col in columns + (["access calls"] if access else []):
            tab4.add_column(col, justify="left" if col == "role" else "right")
        for role, r in invocations.items():
            cells = [
                role,
                str(r["invocations"]),
                f"{r['searches_per_invocation']:.2f}",
                f"{r['share_1_search']:.1%}",
                f"{r['share_2plus_searches']:.1%}",
            ]
            if access:
                cells.append(f"{r.get('access_calls', 0)} ({r.get('access_call_share', 0.0):.1%})")
            tab4.add_row(*cells)
        console.print(tab4)
    if summary.get("episodes_per_driver"):
        console.print(f"episodes per driver (separate collection): {summary['episodes_per_driver']}")
    for role, replicas in (summary.get("replicas") or {}).items():
        tab = Table(title=f"{role}: requests per replica")
        for col in ("replica", "requests", "failures", "in pool", "taken out", "put back"):
            tab.add_column(col, justify="left" if col == "replica" else "right")
        for url, c in replicas.items():
            flags = (
                c["requests"],
                c["failures"],
                "yes" if c["healthy"] else "no",
                c["removed"],
                c["restored"],
            )
            tab.add_row(url, *map(str, flags))
        console.print(tab)
    errors = (
        f"stop reasons: {summary['stop_reasons']}; episode errors: {summary['episode_errors']}; "
        f"counterfactual runs: {summary['counterfactual_runs']}"
    )
    return console.export_text() + errors

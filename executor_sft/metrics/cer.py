"""CER-C: how fast the executors find the gold passages per unit of context consumed.

After each bucket of `B` context tokens (default 10K) we ask what fraction of the
question's gold passages has been retrieved so far; the score is the mean of that step
curve over `N` buckets (the area under the step curve, not a trapezoid), so a system that
finds the evidence early and cheaply scores higher than one that finds it late.

What a token of context is (`token_count`):
- `calls` (ours, the default): the cumulative prompt+completion tokens of the episode's executor
  calls in the order the calls started, so each call's prompt is counted again (the compute spent).
- `context` (the blog's reading, its Setup section: buckets of the context the agent has
  consumed): each call
  adds only what its context grew by (its prompt+completion less the previous call's of the same
  run), so a run's count is the length of its context, and the episode's is the sum over runs.
- `completion` (ours): only the tokens the executors generated. A passage retrieved by a search counts at the cumulative
count *including* the call that issued the search, and a count of exactly `i*B` belongs to
bucket `i`.

Without gold passage ids the metric is undefined, so `answer_bearing_cer_c` is a named proxy
(retrieval recall in FlashRAG's sense): a retrieved passage is evidence when it contains a
normalised gold answer alias (cover-EM's containment test), and the curve says whether an
answer-bearing passage had been retrieved by each bucket (one relevant item: 0 or 1 per
bucket, so the AUC is how early the first one came). It rewards finding the answer string,
not the bridge passages of earlier hops; tables that show it name it "answer-bearing".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from executor_sft.metrics.answer import Normalization, cover_exact_match
from executor_sft.metrics.tokens import call_usages, search_turns, system_runs
from executor_sft.schema import Episode

CerEvent = tuple[int, Sequence[str]]
"""(context tokens consumed so far, doc ids retrieved at that point)."""

TokenCount = Literal["calls", "context", "completion"]
TOKEN_COUNTS: tuple[str, ...] = ("calls", "context", "completion")


def _completion_usages(run: Any, totals: list[int]) -> list[int]:
    """Completion tokens of each call: recorded per call, else the run's completion total split
    like its call totals (an estimate), else each call's total."""
    calls = run.calls
    if isinstance(calls, list) and calls and all(isinstance(c, dict) and "usage" in c for c in calls):
        return [int(c["usage"].get("completion_tokens", 0)) for c in calls]
    completion = int(run.usage.completion_tokens)
    if completion > 0 and sum(totals) > 0:
        shares = [int(t * completion / sum(totals)) for t in totals]
        shares[-1] += completion - sum(shares)
        return shares
    return totals


def call_tokens(run: Any, tokenizer: Any | None = None, token_count: TokenCount = "calls") -> list[int]:
    """What each executor call of a run adds to CER-C's token axis (module docstring)."""
    totals = call_usages(run, tokenizer)
    if token_count == "calls":
        return totals
    if token_count == "context":
        grown, previous = [], 0
        for total in totals:
            grown.append(max(0, total - previous))
            previous = max(previous, total)
        return grown
    if token_count == "completion":
        return _completion_usages(run, totals)
    raise ValueError(f"token_count must be one of {', '.join(TOKEN_COUNTS)}, got {token_count!r}")


def cer_c(
    events: Iterable[CerEvent],
    gold_ids: Iterable[str],
    bucket_tokens: int = 10_000,
    n_buckets: int = 10,
) -> tuple[list[float], float]:
    """Return (curve, auc): `curve[i-1]` = fraction of gold retrieved at tokens <= i*B.

    `events` need not be sorted; a gold passage counts at the first (smallest-token) event
    that retrieved it. Raises ValueError when there are no gold ids (the metric is undefined).
    """
    if bucket_tokens <= 0 or n_buckets <= 0:
        raise ValueError(f"bucket_tokens and n_buckets must be positive, got {bucket_tokens}, {n_buckets}")
    gold = set(gold_ids)
    if not gold:
        raise ValueError("CER-C needs at least one gold passage id")
    first_seen: dict[str, int] = {}
    for tokens, doc_ids in events:
        if tokens < 0:
            raise ValueError(f"negative token count in CER-C event: {tokens}")
        for doc_id in doc_ids:
            if doc_id in gold and tokens < first_seen.get(doc_id, math.inf):
                first_seen[doc_id] = tokens
    # Bucket of a retrieval at t tokens: the smallest i with t <= i*B (t = 0 falls in bucket 1).
    buckets = [max(1, math.ceil(t / bucket_tokens)) for t in first_seen.values()]
    curve = [sum(b <= i for b in buckets) / len(gold) for i in range(1, n_buckets + 1)]
    return curve, sum(curve) / n_buckets


def cer_events_from_episode(
    episode: Episode,
    roles: Sequence[str] | None = None,
    tokenizer: Any | None = None,
    token_count: TokenCount = "calls",
) -> list[CerEvent]:
    """The (cumulative tokens, doc ids) events of an episode's executor searches.

    By default only the driver role's runs count (the runs whose reports the system used:
    shadow runs and counterfactual re-runs of a collection episode consumed no context of the
    deployed system). Calls are ordered by their recorded start time (`calls[i].t_start`)
    when every call has one, which interleaves the parallel runs of a round as they really
    ran; otherwise by (round, sub-query index, turn).
    """
    entries = []  # (order key, tokens, run position, turn)
    runs = system_runs(episode, roles)
    timed = True
    for r_pos, run in enumerate(runs):
        starts = _call_starts(run)
        timed = timed and starts is not None
        for turn, tokens in enumerate(call_tokens(run, tokenizer, token_count)):
            start = starts[turn] if starts is not None and turn < len(starts) else None
            entries.append((start, (run.round, run.sub_query_index, turn), tokens, r_pos, turn))
    entries.sort(key=lambda e: (e[0], e[1]) if timed else e[1])
    at_call: dict[tuple[int, int], int] = {}
    consumed = 0
    for _, _, tokens, r_pos, turn in entries:
        consumed += tokens
        at_call[(r_pos, turn)] = consumed
    events: list[CerEvent] = []
    for r_pos, run in enumerate(runs):
        turns = search_turns(run)
        n_calls = sum(1 for key in at_call if key[0] == r_pos)
        for i, search in enumerate(run.searches):
            # The i-th search was issued by the i-th assistant turn that searched.
            turn = min(turns[i] if i < len(turns) else n_calls - 1, n_calls - 1)
            events.append((at_call.get((r_pos, turn), consumed), list(search.doc_ids)))
    return events


def _call_starts(run) -> list[float] | None:
    calls = run.calls
    if not isinstance(calls, list) or not calls:
        return None
    starts = [c.get("t_start") if isinstance(c, dict) else None for c in calls]
    return starts if all(isinstance(t, (int, float)) for t in starts) else None


def episode_cer_c(
    episode: Episode,
    bucket_tokens: int = 10_000,
    n_buckets: int = 10,
    roles: Sequence[str] | None = None,
    token_count: TokenCount = "calls",
) -> tuple[list[float], float] | None:
    """CER-C of one episode, or None when its question carries no gold passage ids."""
    gold = episode.question.positive_doc_ids
    if not gold:
        return None
    events = cer_events_from_episode(episode, roles, token_count=token_count)
    return cer_c(events, gold, bucket_tokens, n_buckets)


_ANSWER = "\x00answer-bearing"  # the one pseudo passage id the proxy's events carry


def answer_bearing_cer_c(
    episode: Episode,
    passage_text: Callable[[str], str | None],
    bucket_tokens: int = 10_000,
    n_buckets: int = 10,
    roles: Sequence[str] | None = None,
    normalization: Normalization = "squad",
    token_count: TokenCount = "calls",
) -> tuple[list[float], float] | None:
    """CER-C with "contains a gold answer alias" in place of gold passage ids (see the module
    docstring); `passage_text(doc_id)` is a retrieved passage's text (None: unknown, not evidence).
    None when the question has no gold answer."""
    aliases = [a for a in episode.question.golden_answers if a and a.strip()]
    if not aliases:
        return None
    verdict: dict[str, bool] = {}

    def bearing(doc_id: str) -> bool:
        if doc_id not in verdict:
            text = passage_text(doc_id)
            verdict[doc_id] = text is not None and cover_exact_match(text, aliases, normalization) == 1.0
        return verdict[doc_id]

    events = [
        (tokens, [_ANSWER] if any(bearing(d) for d in doc_ids) else [])
        for tokens, doc_ids in cer_events_from_episode(episode, roles, token_count=token_count)
    ]
    return cer_c(events, [_ANSWER], bucket_tokens, n_buckets)

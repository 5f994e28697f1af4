"""A matched control for the counterfactual filter: the same rows, second searches drawn blind.

The full filter keeps a run that searched more than once only if the same executor, allowed one
search, failed (`info_gain_multi_search`). To ask whether that test itself teaches *when* to
search again, compare it with a control of the same size and shape: the full filter's one-search
rows, plus as many multi-search rows as it kept, drawn at random from every correct multi-search
run of the driving role (`all_correct` rows), with no counterfactual test. Only which second
searches are shown differs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from executor_sft.filters.rows import SFTRow
from executor_sft.filters.stratum import INFO_GAIN_MULTI_SEARCH, SINGLE_SEARCH

MATCHED_MULTI_SEARCH = "matched_multi_search"
"""The stratum name of the control's randomly drawn multi-search rows."""


def n_searches(row: SFTRow) -> int:
    """Tool calls made in a row's assistant turns."""
    return sum(len(m.get("tool_calls") or []) for m in row["messages"] if m.get("role") == "assistant")


def matched_control(
    full_rows: Sequence[SFTRow], all_correct_rows: Sequence[SFTRow], seed: int, role: str = "teacher"
) -> list[SFTRow]:
    """The control's rows: `full_rows`' single-search rows, then as many multi-search rows as
    `full_rows` holds, sampled with `seed` from `all_correct_rows` that searched more than once
    and came from `role` (the suffix of `source_run_id`). Raises ValueError when there are too few."""
    single = [r for r in full_rows if r["stratum"] == SINGLE_SEARCH]
    want = sum(r["stratum"] == INFO_GAIN_MULTI_SEARCH for r in full_rows)
    pool = [
        r for r in all_correct_rows if n_searches(r) >= 2 and r["source_run_id"].rsplit("/", 1)[-1] == role
    ]
    if len(pool) < want:
        raise ValueError(
            f"matched control: {want} multi-search rows wanted, only {len(pool)} correct {role} runs"
        )
    drawn = [{**r, "stratum": MATCHED_MULTI_SEARCH} for r in random.Random(seed).sample(pool, want)]
    return [*single, *drawn]


__all__ = ["MATCHED_MULTI_SEARCH", "matched_control", "n_searches"]

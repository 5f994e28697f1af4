"""Search and research-phase latency of episodes: T_search per call and the research time per episode.

T_search is one search call's wall time (`SearchRecord.latency_s`); the research time is an
episode's backbone rounds with their executor runs, up to the answerer (`Episode.research_s`).
The search-agent blog reports the first as P50/P95 over calls and the second as its median
("Research P50"); percentiles here are numpy's linear interpolation. Records written without
timings contribute nothing, and a group with none reports None.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from executor_sft.metrics.tokens import system_runs
from executor_sft.schema import Episode


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q`-th percentile (0-100) of `values`, or None when there are none."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def search_latencies(episode: Episode, roles: Sequence[str] | None = None) -> list[float]:
    """T_search of every timed search of the system's own runs (the driver role's by default)."""
    return [s.latency_s for r in system_runs(episode, roles) for s in r.searches if s.latency_s is not None]


def research_times(episodes: Iterable[Episode]) -> list[float]:
    return [e.research_s for e in episodes if e.research_s is not None]

"""Composable trajectory filters and the training strata (docs/filters.md).

Quick use::

    from executor_sft.filters import FilterConfig, filter_episodes, iter_episodes_by_id
    result = filter_episodes(iter_episodes_by_id("rollouts.jsonl"), FilterConfig(require_judge=False))
    result.rows     # TRL conversational rows
    result.report   # composition report (dict)

The pieces (predicates, strata, dedupe, row building, report) are exported for custom pipelines.
"""

from executor_sft.errors import InputError, MalformedLineError
from executor_sft.files import (
    Located,
    atomic_open,
    iter_jsonl,
    refuse_overwrite,
    require_file,
    write_json,
    write_jsonl,
)
from executor_sft.filters.config import FilterConfig
from executor_sft.filters.dedupe import Deduper, canonical_key, canonical_messages
from executor_sft.filters.pipeline import (
    EpisodeFilter,
    FilterResult,
    filter_episodes,
    load_fidelity_tokenizer,
)
from executor_sft.filters.predicates import (
    correctness_failure,
    is_correct,
    is_counterfactual,
    malformed_turn,
    needs_correction,
)
from executor_sft.filters.records import RecordError, parse_episode, parse_run
from executor_sft.filters.report import CompositionReport, composition_table, exclusion_table, print_report
from executor_sft.filters.rows import RowError, SFTRow, normalize_messages, to_sft_row
from executor_sft.filters.strata import (
    Decision,
    EpisodeContext,
    all_correct,
    classify_episode,
    classify_run,
    info_gain_multi_search,
    single_search,
)
from executor_sft.filters.stratum import (
    ALL_CORRECT,
    DEFAULT_STRATA,
    INFO_GAIN_MULTI_SEARCH,
    SINGLE_SEARCH,
    STRATA,
    Stratum,
    resolve_stratum,
)
from executor_sft.store import iter_episodes_by_id

__all__ = [
    "load_fidelity_tokenizer",
    "ALL_CORRECT",
    "DEFAULT_STRATA",
    "INFO_GAIN_MULTI_SEARCH",
    "SINGLE_SEARCH",
    "STRATA",
    "CompositionReport",
    "Decision",
    "Deduper",
    "EpisodeContext",
    "EpisodeFilter",
    "FilterConfig",
    "FilterResult",
    "InputError",
    "Located",
    "MalformedLineError",
    "RecordError",
    "RowError",
    "SFTRow",
    "Stratum",
    "all_correct",
    "atomic_open",
    "canonical_key",
    "canonical_messages",
    "classify_episode",
    "classify_run",
    "composition_table",
    "correctness_failure",
    "exclusion_table",
    "filter_episodes",
    "info_gain_multi_search",
    "is_correct",
    "is_counterfactual",
    "iter_episodes_by_id",
    "iter_jsonl",
    "malformed_turn",
    "needs_correction",
    "normalize_messages",
    "parse_episode",
    "parse_run",
    "print_report",
    "refuse_overwrite",
    "require_file",
    "resolve_stratum",
    "single_search",
    "to_sft_row",
    "write_json",
    "write_jsonl",
]

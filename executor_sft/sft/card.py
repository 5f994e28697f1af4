"""The executor-specific part of the model card: data composition, length handling, config."""

from __future__ import annotations

import json
from typing import Any


def _table(counts: dict[str, int], key: str) -> str:
    lines = [f"| {key} | rows |", "| --- | ---: |"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    return "\n".join(lines)


def executor_card_section(
    *,
    data_source: str,
    row_counts: dict[str, dict[str, int]],
    composition_report: dict[str, Any] | None,
    length_summary: dict[str, Any],
    config: dict[str, Any],
) -> str:
    parts = [
        "## executor_sft training record",
        f"Data: `{data_source}` — {sum(row_counts['stratum'].values())} rows used for training.",
        "Loss: assistant tokens only (tool calls, final report, `<|im_end|>`); system, sub-query and "
        "retrieved passages are masked. The tokenizer is saved with its inference chat template.",
        "### Rows per stratum",
        _table(row_counts["stratum"], "stratum"),
        "### Rows per dataset",
        _table(row_counts["dataset"], "dataset"),
        "### Long trajectories",
        "```json\n" + json.dumps(length_summary, indent=2) + "\n```",
    ]
    if composition_report is not None:
        parts += [
            "### Composition report (from the filter)",
            "```json\n" + json.dumps(composition_report, indent=2, default=str)[:20000] + "\n```",
        ]
    parts += ["### Configuration", "```json\n" + json.dumps(config, indent=2, default=str) + "\n```"]
    return "\n\n".join(parts) + "\n"

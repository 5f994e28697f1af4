"""Loading and checking SFT rows (sft.jsonl or a Hub dataset), and their composition report."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from executor_sft.data.local_path import HUB_PREFIX, did_you_mean, names_a_local_file
from executor_sft.errors import MalformedLineError, MissingFileError, RowError
from executor_sft.files import iter_records
from executor_sft.llm.parsing import parse_tool_call
from executor_sft.tool_protocol import first_problem

# The embedded default's data: the project's own sample, produced by its synthetic pipeline.
DEFAULT_SFT_DATA = Path(__file__).resolve().parents[2] / "data" / "sft.jsonl"

_ROLES = {"system", "user", "assistant", "tool"}


def validate_row(row: Any, where: str) -> dict[str, Any]:
    """Check the fields tokenisation relies on; raise `RowError` naming `where` and the field."""
    if not isinstance(row, dict):
        raise RowError(f"{where}: expected a JSON object, got {type(row).__name__}")
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RowError(f"{where}: field 'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        _check_message(m, f"{where}: field messages[{i}]")
    if not any(m["role"] == "assistant" for m in messages):
        raise RowError(f"{where}: field 'messages' has no assistant message, so nothing would be trained")
    _check_chat_protocol(messages, where)
    tools = row.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RowError(f"{where}: field 'tools' must be a list")
    if "sampled_tokens" in row:
        _check_sampled_tokens(row["sampled_tokens"], messages, where)
    return row


def _check_sampled_tokens(sampled: Any, messages: list[dict[str, Any]], where: str) -> None:
    """One `{"ids": [int], "vocabulary"}` or null per assistant message (what token fidelity reads)."""
    n_assistant = sum(1 for m in messages if m["role"] == "assistant")
    if not isinstance(sampled, list) or len(sampled) != n_assistant:
        raise RowError(
            f"{where}: field 'sampled_tokens' must be a list with one entry per assistant message "
            f"({n_assistant}); remove the field to train without it"
        )
    for i, entry in enumerate(sampled):
        if entry is None:
            continue
        ids = entry.get("ids") if isinstance(entry, dict) else None
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            raise RowError(f"{where}: field sampled_tokens[{i}].ids must be a list of token ids")


def _check_message(m: Any, field: str) -> None:
    """One message of a row; `field` is `<where>: field messages[i]`."""
    if not isinstance(m, dict) or m.get("role") not in _ROLES:
        raise RowError(f"{field}.role must be one of {sorted(_ROLES)}")
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        raise RowError(f"{field}.content must be a string")
    if m["role"] != "assistant":
        return
    for j, call in enumerate(m.get("tool_calls") or []):
        parsed = parse_tool_call(call)
        if parsed is None or not isinstance(parsed.name, str):
            raise RowError(f"{field}.tool_calls[{j}].function.name is missing")
        if parsed.error is not None:
            raise RowError(f"{field}.tool_calls[{j}].function.arguments is not JSON: {parsed.error}")
        if not isinstance(parsed.raw, str | dict):
            raise RowError(f"{field}.tool_calls[{j}].function.arguments must be a JSON string")


def _check_chat_protocol(messages: list[dict[str, Any]], where: str) -> None:
    """The tool protocol every stage checks (`executor_sft.tool_protocol`), and the row ends on an
    assistant turn: otherwise the model learns from results nobody asked for, from calls nobody
    answered, or from a turn it never completes."""
    problem = first_problem(messages)
    if problem is not None:
        raise RowError(f"{where}: field {problem}")
    last = messages[-1]["role"]
    if last != "assistant":
        raise RowError(
            f"{where}: field messages[{len(messages) - 1}] is a {last} turn: "
            "a row must end on an assistant turn (remove the trailing turns or complete the row)"
        )


def read_sft_jsonl(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(
            f"{path}: SFT data file not found (--dataset_name){did_you_mean(path)}; check the path, "
            "or write a Hub dataset as hf://org/name"
        )
    try:
        rows = [validate_row(row, f"{path}:{i}") for i, row in iter_records(path, require_object=False)]
    except MalformedLineError as exc:
        raise RowError(str(exc)) from None
    if not rows:
        raise RowError(
            f"{path}: no rows, nothing to train on; a filter run that kept no row writes this file only with "
            "--allow_empty true (its report counts why), so pass a file with rows to --dataset_name"
        )
    return rows


def is_local(source: str | Path) -> bool:
    return names_a_local_file(source)


def load_sft_rows(
    source: str | Path, split: str = "train", config: str | None = None
) -> list[dict[str, Any]]:
    """Rows from a local JSONL file or a Hub dataset (`datasets.load_dataset(source, config)[split]`)."""
    if is_local(source):
        return read_sft_jsonl(source)
    from datasets import load_dataset

    ds = load_dataset(str(source).removeprefix(HUB_PREFIX), name=config, split=split)
    return [validate_row(dict(r), f"{source}[{split}] row {i}") for i, r in enumerate(ds)]


def find_composition_report(source: str | Path, given: str | Path | None = None) -> dict[str, Any] | None:
    """The filter's composition report: `given`, else `<stem>.report.json` or `report.json` beside the data."""
    candidates = [Path(given)] if given else []
    if not given and is_local(source):
        p = Path(source)
        candidates += [p.with_name(p.stem + ".report.json"), p.with_name("report.json")]
    for c in candidates:
        if c.exists():
            return json.loads(c.read_text(encoding="utf-8"))
    if given:
        raise MissingFileError(f"composition report not found: {given}")
    return None


def row_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Rows per stratum and per dataset (for the log and the model card when no report exists)."""
    return {
        "stratum": dict(Counter(str(r.get("stratum", "unknown")) for r in rows)),
        "dataset": dict(Counter(str(r.get("dataset", "unknown")) for r in rows)),
    }

"""Composition report of a filtered SFT set (like the paper's Table 7) and its console table.

Rows are datasets, columns are strata; a cell holds records / unique source questions
(a question is identified by (dataset, question id), so repeated samples count once). The
caption (and `per_question` in the JSON) says how many questions gave 1, 2, ... records and the
most records one (question, stratum) gave: 1 with `max_records_per_question_stratum: 1`. That
cap is our reading of App. D, which says a question can give more than one record "when
trajectories from different strata are retained for it"; it implies, without stating, at most one
record per (question, stratum).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table

from executor_sft.filters.config import FilterConfig
from executor_sft.sft.fidelity import FidelityReport

TOTAL = "total"


class CompositionReport:
    """Accumulates kept rows and exclusion reasons while the filter streams episodes."""

    def __init__(self, config: FilterConfig, fidelity_checked: bool = False):
        self.config = config
        self.fidelity = FidelityReport(policy=None)
        self.fidelity_checked = fidelity_checked
        self.episodes = 0
        self.runs = 0
        self._records: Counter[tuple[str, str]] = Counter()
        self._questions: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._roles: Counter[tuple[str, str]] = Counter()
        self._per_question: Counter[tuple[str, str]] = Counter()
        self._per_question_stratum: Counter[tuple[str, str, str]] = Counter()
        self.exclusions: Counter[str] = Counter()

    def add_episode(self, n_runs: int) -> None:
        self.episodes += 1
        self.runs += n_runs

    def add_row(self, row: dict[str, Any], role: str) -> None:
        key = (row["dataset"], row["stratum"])
        self._records[key] += 1
        self._questions[key].add(row["question_id"])
        self._roles[(row["stratum"], role)] += 1
        self._per_question[(row["dataset"], row["question_id"])] += 1
        self._per_question_stratum[(row["dataset"], row["question_id"], row["stratum"])] += 1

    def add_exclusion(self, reason: str) -> None:
        self.exclusions[reason] += 1

    @property
    def rows(self) -> int:
        return sum(self._records.values())

    def _cell(self, datasets: list[str] | None, strata: list[str]) -> dict[str, int]:
        keys = [k for k in self._records if (datasets is None or k[0] in datasets) and k[1] in strata]
        questions = {(k[0], q) for k in keys for q in self._questions[k]}
        return {"records": sum(self._records[k] for k in keys), "unique_questions": len(questions)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready report: totals, per stratum, per dataset x stratum (records and unique
        questions, the paper's Tab. 7 columns; its rows are datasets only, the stratum split is
        ours, to show where a dataset's records come from), records per question, exclusions, config."""
        strata = list(self.config.strata)
        datasets = sorted({k[0] for k in self._records})
        total = self._cell(None, strata)
        return {
            "totals": {
                "episodes": self.episodes,
                "runs": self.runs,
                "rows": total["records"],
                "unique_questions": total["unique_questions"],
                "excluded": sum(self.exclusions.values()),
            },
            "strata": {
                s: {
                    **self._cell(None, [s]),
                    "by_role": {r: n for (st, r), n in sorted(self._roles.items()) if st == s},
                }
                for s in strata
            },
            "datasets": {
                d: {**{s: self._cell([d], [s]) for s in strata}, TOTAL: self._cell([d], strata)}
                for d in datasets
            },
            "per_question": {
                "records_per_question": {
                    str(n): q for n, q in sorted(Counter(self._per_question.values()).items())
                },
                "max_records_per_question_stratum": max(self._per_question_stratum.values(), default=0),
            },
            "exclusions": dict(sorted(self.exclusions.items(), key=lambda kv: (-kv[1], kv[0]))),
            "config": self.config.to_dict(),
            # Only where rows carry sampled ids or were checked: reports of id-less data stay as they were.
            **(
                {"token_fidelity": self.fidelity_section()}
                if self.fidelity_checked or self.fidelity.any_ids
                else {}
            ),
        }

    def fidelity_section(self) -> dict[str, Any]:
        """Per stratum: rows, checked (same vocabulary), drifted, without ids, other vocabulary,
        and `unchecked` (ids, but no tokenizer was given to compare them with)."""
        return self.fidelity.to_dict()


def composition_table(report: dict[str, Any]) -> Table:
    """Datasets x strata table of `records / unique questions` from `CompositionReport.to_dict()`."""
    strata = list(report["strata"])
    # Tab. 7 has the dataset rows and the total column; the per-stratum columns are ours.
    table = Table(title="SFT composition (records / unique source questions; total: the paper's Tab. 7)")
    table.add_column("dataset")
    for s in [*strata, TOTAL]:
        table.add_column(s, justify="right")

    def fmt(cell: dict[str, int]) -> str:
        return f"{cell['records']} / {cell['unique_questions']}"

    for name, row in report["datasets"].items():
        table.add_row(name, *(fmt(row[s]) for s in [*strata, TOTAL]))
    totals = report["totals"]
    table.add_row(
        "total",
        *(fmt(report["strata"][s]) for s in strata),
        f"{totals['rows']} / {totals['unique_questions']}",
        style="bold",
    )
    per_question = report.get("per_question")
    if per_question:  # reports written before the section existed have none
        spread = ", ".join(f"{n}: {q}" for n, q in per_question["records_per_question"].items()) or "none"
        table.caption = (
            f"questions by records: {spread}; at most {per_question['max_records_per_question_stratum']} "
            "per (question, stratum)"
        )
    return table


def exclusion_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"Excluded runs ({report['totals']['excluded']} of {report['totals']['runs']})")
    table.add_column("reason")
    table.add_column("runs", justify="right")
    for reason, n in report["exclusions"].items():
        table.add_row(reason, str(n))
    return table


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    """Pretty-print both tables (to stderr by default, so stdout stays clean for pipes)."""
    console = console or Console(stderr=True)
    console.print(composition_table(report))
    console.print(exclusion_table(report))
    if "token_fidelity" in report:
        console.print(fidelity_table(report["token_fidelity"]))


def fidelity_table(section: dict[str, Any]) -> Table:
    """Strata x (rows, checked, drifted, without ids, other vocabulary[, unchecked])."""
    columns = ["rows", "checked", "drifted", "without_ids", "other_vocabulary"]
    if "unchecked" in section["totals"]:
        columns.append("unchecked")
    table = Table(title="Token fidelity (re-rendered assistant turns vs the sampled ids)")
    table.add_column("stratum")
    for c in columns:
        table.add_column(c.replace("_", " "), justify="right")
    for name, counts in section["strata"].items():
        table.add_row(name, *(str(counts.get(c, 0)) for c in columns))
    table.add_row("total", *(str(section["totals"].get(c, 0)) for c in columns), style="bold")
    return table

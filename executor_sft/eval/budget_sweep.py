"""Width and depth sweeps: one set of models, the pipeline's budgets varied (P; T and K).

WideSeek-R1 (seed summary, Sec. 5.2) scales width (parallel sub-agents per lead turn) against
depth (more turns) and finds that width keeps helping on broad tasks while depth plateaus.
Here an axis varies one `PipelineConfig` budget (`max_parallel` = P, `max_rounds` = T,
`max_turns` = K) with the others held; every point is a normal evaluation (`run_eval`) in
`<output_dir>/cells/<axis>-<field>-<value>/`, so points resume independently. Table questions
are scored by item F1, row F1 and success (Avg@k, Max@k, Pass@k over the k samples), text
questions by EM; cost is sub-agents and sub-agent tokens per question. Writes
`budget_sweep.md`, `budget_sweep.json` and `budget_sweep.png` (docs/wide.md, "Sweeps").
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from executor_sft.configfile import load_config
from executor_sft.eval.cells import cell_config, read_base
from executor_sft.eval.config import EvalConfig
from executor_sft.eval.report import write_markdown
from executor_sft.eval.runner import WrittenFiles, run_eval
from executor_sft.files import write_json
from executor_sft.llm.pool import ModelPool
from executor_sft.metrics.table import at_k
from executor_sft.metrics.tokens import subagent_tokens, system_runs
from executor_sft.preflight import Part
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import Episode

BUDGET_MD = "budget_sweep.md"
BUDGET_JSON = "budget_sweep.json"
BUDGET_PNG = "budget_sweep.png"

Budget = Literal["max_parallel", "max_rounds", "max_turns"]
SHORT = {"max_parallel": "P", "max_rounds": "T", "max_turns": "K"}
Metric = Literal["item_f1", "row_f1", "success", "em"]


class BudgetAxis(BaseModel):
    """One line of the plot: `field` takes each of `values`, the budgets in `fixed` are held."""

    model_config = ConfigDict(extra="forbid")
    name: str
    """Its label ("width", "depth (K)")."""
    field: Budget
    values: list[int] = Field(min_length=1)
    fixed: dict[Budget, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> BudgetAxis:
        if self.field in self.fixed:
            raise ValueError(f"axis {self.name!r}: {self.field} is both varied and fixed")
        if min(self.values) < 1 or min(self.fixed.values(), default=1) < 1:
            raise ValueError(f"axis {self.name!r}: budgets are >= 1")
        return self


class BudgetSweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "budget-sweep"
    output_dir: str
    base: str | dict[str, Any]
    """An eval config (YAML path or inline mapping): questions, samples, models, pipeline,
    retriever. Each point replaces its name, output_dir and the varied budgets."""
    axes: list[BudgetAxis] = Field(min_length=1)
    metric: Metric = "item_f1"
    """The plot's y axis (table questions: item_f1, row_f1, success; text questions: em)."""

    def preflight_parts(self, where: str) -> list[Part]:
        """The base's models and retriever (every point shares them), under the file that names them."""
        base_where = self.base if isinstance(self.base, str) else f"{where} (base)"
        return build_points(self)[0].config.preflight_parts(base_where)


def load_budget_sweep_config(path: str | Path, sets: list[str] | None = None) -> BudgetSweepConfig:
    return load_config(BudgetSweepConfig, path, sets=sets)


@dataclass
class BudgetPoint:
    axis: str
    field: str
    value: int
    budgets: dict[str, int]
    """P, T and K this point ran with."""
    config: EvalConfig


def build_points(sweep: BudgetSweepConfig) -> list[BudgetPoint]:
    base = read_base(sweep.base)
    base_pipeline = dict(base.get("pipeline") or {})
    points = []
    for axis in sweep.axes:
        for value in axis.values:
            slug = f"{axis.name}-{SHORT[axis.field]}{value}"
            slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in slug)
            name = f"{sweep.name} {axis.name} {SHORT[axis.field]}={value}"
            config = cell_config(
                base,
                f"budget sweep {sweep.name}, point {name}",
                name=name,
                output_dir=str(Path(sweep.output_dir) / "cells" / slug),
                pipeline={**base_pipeline, **axis.fixed, axis.field: value},
            )
            budgets = {short: getattr(config.pipeline, f) for f, short in SHORT.items()}
            points.append(BudgetPoint(axis.name, axis.field, value, budgets, config))
    return points


@dataclass
class BudgetRow:
    axis: str
    field: str
    value: int
    budgets: dict[str, int]
    n_table: int
    """Table questions scored (their scores are None when there are none)."""
    n_text: int
    item_f1_avg: float | None
    item_f1_max: float | None
    row_f1_avg: float | None
    row_f1_max: float | None
    success_avg: float | None
    success_pass: float | None
    em_avg: float | None
    """Text questions' EM, Avg@k."""
    rounds: float
    """Backbone rounds that dispatched sub-queries, per episode (the lead's sequential turns)."""
    subagents: float
    """Sub-agents (driver executor runs) per episode."""
    subagent_tokens: float
    """Sub-agent tokens per episode (as `metrics.tokens.subagent_tokens` counts them)."""
    k: int

    def metric(self, name: str) -> float | None:
        return getattr(self, "em_avg" if name == "em" else f"{name}_avg")


def score_point(point: BudgetPoint, episodes: list[Episode]) -> BudgetRow:
    table = [e for e in episodes if e.question.unique_columns]
    text = [e for e in episodes if not e.question.unique_columns]

    def table_at_k(name: str):
        return at_k((e.question.id, getattr(e.metrics, name) or 0.0) for e in table) if table else None

    item, row, success = table_at_k("item_f1"), table_at_k("row_f1"), table_at_k("success")
    em = at_k((e.question.id, e.metrics.em) for e in text) if text else None
    n = len(episodes) or 1
    return BudgetRow(
        axis=point.axis,
        field=point.field,
        value=point.value,
        budgets=point.budgets,
        n_table=len({e.question.id for e in table}),
        n_text=len({e.question.id for e in text}),
        item_f1_avg=item.avg if item else None,
        item_f1_max=item.max if item else None,
        row_f1_avg=row.avg if row else None,
        row_f1_max=row.max if row else None,
        success_avg=success.avg if success else None,
        success_pass=success.pass_ if success else None,
        em_avg=em.avg if em else None,
        rounds=sum(sum(1 for r in e.rounds if r.sub_queries) for e in episodes) / n,
        subagents=sum(len(system_runs(e)) for e in episodes) / n,
        subagent_tokens=statistics.fmean(subagent_tokens(e) for e in episodes) if episodes else 0.0,
        k=max((x.k for x in (item, em) if x), default=0),
    )


def budget_markdown(name: str, rows: list[BudgetRow]) -> str:
    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.1f}"

    k = max((r.k for r in rows), default=1)
    header = [
        "axis", "P", "T", "K", f"item F1 Avg@{k}", f"item F1 Max@{k}", f"row F1 Avg@{k}", f"row F1 Max@{k}",
        f"success Avg@{k}", f"success Pass@{k}", "EM (text)", "rounds/q", "sub-agents/q", "sub-agent tokens/q",
    ]  # fmt: skip
    lines = [f"## {name}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [
            r.axis, str(r.budgets["P"]), str(r.budgets["T"]), str(r.budgets["K"]),
            pct(r.item_f1_avg), pct(r.item_f1_max), pct(r.row_f1_avg), pct(r.row_f1_max),
            pct(r.success_avg), pct(r.success_pass), pct(r.em_avg), f"{r.rounds:.1f}", f"{r.subagents:.1f}",
            f"{r.subagent_tokens:,.0f}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    n_table = max((r.n_table for r in rows), default=0)
    n_text = max((r.n_text for r in rows), default=0)
    lines += ["", f"{n_table} table questions, {n_text} text questions, k = {k} samples each."]
    return "\n".join(lines) + "\n"


@dataclass
class BudgetSweepResult(WrittenFiles):
    rows: list[BudgetRow]
    output_dir: Path

    FILES: ClassVar[dict[str, str]] = {"markdown": BUDGET_MD, "json": BUDGET_JSON, "plot": BUDGET_PNG}

    def summary(self) -> str:
        text = (self.output_dir / BUDGET_MD).read_text(encoding="utf-8").rstrip()
        return "\n".join([text, *(f"  {k}: {v}" for k, v in self.files.items())])


def run_budget_sweep(
    sweep: BudgetSweepConfig,
    *,
    pool: ModelPool | None = None,
    retriever: Retriever | None = None,
    progress: bool = True,
) -> BudgetSweepResult:
    """Run every point (each resumable), then write the table, the JSON and the plot."""
    from executor_sft.eval.budget_plots import plot_budget_sweep

    pool = pool or ModelPool()
    out = Path(sweep.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for point in build_points(sweep):
        run = run_eval(point.config, pool=pool, retriever=retriever, progress=progress)
        rows.append(score_point(point, run.episodes))
        write_markdown(budget_markdown(sweep.name, rows), out / BUDGET_MD)
    write_json(
        out / BUDGET_JSON, {"name": sweep.name, "metric": sweep.metric, "rows": [asdict(r) for r in rows]}
    )
    plot_budget_sweep(rows, out / BUDGET_PNG, metric=sweep.metric, title=sweep.name)
    return BudgetSweepResult(rows, out)


def load_rows(path: str | Path) -> list[BudgetRow]:
    """The rows of a `budget_sweep.json`."""
    return [BudgetRow(**r) for r in json.loads(Path(path).read_text(encoding="utf-8"))["rows"]]

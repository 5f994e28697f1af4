"""Sweep a grid of (backbone, executor) model pairs plus single-agent and no-retrieval baselines.

Every cell is a normal evaluation (`run_eval`) in `<cells_dir>/<cell>/` (default
`<output_dir>/cells/`), so cells resume independently; a finished cell whose config is
unchanged is loaded from its `results.json` without building any model, also when another
sweep sharing `cells_dir` ran it. Loaded models are shared across cells. The combined table
and JSON are rewritten after every cell, the Pareto / capacity / role-curve plots at the end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from executor_sft.configfile import load_config, validation_message
from executor_sft.data.idlist import ids_digest, read_ids
from executor_sft.data.selection import QuestionSource
from executor_sft.errors import ConfigError
from executor_sft.eval.aggregate import EvalResults
from executor_sft.eval.cells import cell_config, driver_pipeline, read_base
from executor_sft.eval.config import ANSWERER_ROLE, JUDGE_ROLE, SINGLE_AGENT_ROLE, EvalConfig
from executor_sft.eval.plots import Point, plot_capacity, plot_pareto, plot_role_curves
from executor_sft.eval.report import sweep_markdown, write_markdown
from executor_sft.eval.runner import RESULTS_JSON, WrittenFiles, run_eval
from executor_sft.files import write_json
from executor_sft.llm.config import ChatModelConfig
from executor_sft.llm.pool import ModelPool
from executor_sft.preflight import Part, model_parts
from executor_sft.retrieval.base import Retriever
from executor_sft.retrieval.config import RetrieverConfig

logger = logging.getLogger(__name__)

CELL_FILE = "cell.json"
SWEEP_JSON = "sweep.json"
SWEEP_MD = "sweep.md"
PARETO_PNG = "pareto.png"
PARETO_LATENCY_PNG = "pareto_latency.png"
CAPACITY_PNG = "capacity.png"
ROLES_PNG = "roles.png"
NO_RETRIEVAL_PREFIX = "no-retrieval:"

Metric = Literal["judge", "em", "cover_em", "f1"]
CellKind = Literal["pipeline", "single_agent", "no_retrieval"]


class RoleCurves(BaseModel):
    """Two one-role sweeps on one plot (the paper's Fig. 2): the decomposition curve varies the
    backbone over `scale` with `fixed_executor`, the execution curve varies the executor over
    `scale` under `fixed_backbone`; an arrow marks each curve's gain from first to last point."""

    model_config = ConfigDict(extra="forbid")
    scale: list[str] = Field(min_length=2)
    """Model keys in x-axis order; each names a backbone and an executor of the sweep."""
    fixed_backbone: str
    fixed_executor: str

    def decomposition(self) -> list[tuple[str, str]]:
        return [(m, self.fixed_executor) for m in self.scale]

    def execution(self) -> list[tuple[str, str]]:
        return [(self.fixed_backbone, m) for m in self.scale]


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "sweep"
    output_dir: str
    base: str | dict[str, Any]
    """An eval config (YAML path or inline mapping) every cell starts from: questions,
    samples, pipeline, retriever, judge, metrics. Its name, output_dir and models are replaced."""
    backbones: dict[str, ChatModelConfig] = Field(default_factory=dict)
    executors: dict[str, ChatModelConfig] = Field(default_factory=dict)
    cells: list[tuple[str, str]] | None = None
    """(backbone, executor) pairs to run, e.g. a diagonal; default: the full grid."""
    cells_dir: str | None = None
    """Where cells live (default `<output_dir>/cells`). Sweeps that share it share the cells both
    run (same name, same config), so a row two tables have in common is run once."""
    answerer: Literal["base", "backbone"] | ChatModelConfig = "base"
    """The answerer of every cell: the base config's (fixed, as in the paper), the cell's backbone, or a model."""
    single_agents: dict[str, ChatModelConfig] = Field(default_factory=dict)
    no_retrieval: dict[str, ChatModelConfig] = Field(default_factory=dict)
    """name -> a model run as the answerer alone, with no retrieval (mode `no_retrieval`)."""
    metric: Metric = "judge"
    """Accuracy on the plots' y axis; falls back to EM for cells without judge verdicts."""
    per_dataset: Metric = "em"
    """The metric of sweep.md's per-dataset columns."""
    role_curves: RoleCurves | None = None
    """Draw `roles.png` from these cells (every pair must be in the grid)."""

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        for b, e in self.cells or []:
            if b not in self.backbones:
                raise ValueError(f"cells: unknown backbone {b!r}; known: {sorted(self.backbones)}")
            if e not in self.executors:
                raise ValueError(f"cells: unknown executor {e!r}; known: {sorted(self.executors)}")
        if not self.grid() and not self.single_agents and not self.no_retrieval:
            raise ValueError("a sweep needs backbones and executors, single_agents or no_retrieval")
        if self.role_curves is not None:
            grid = set(self.grid())
            missing = [
                c for c in self.role_curves.decomposition() + self.role_curves.execution() if c not in grid
            ]
            if missing:
                raise ValueError(f"role_curves: cells not in the sweep: {missing}")
        return self

    @property
    def cells_path(self) -> Path:
        return Path(self.cells_dir) if self.cells_dir else Path(self.output_dir) / "cells"

    def grid(self) -> list[tuple[str, str]]:
        if self.cells is not None:
            return [tuple(c) for c in self.cells]
        return [(b, e) for b in self.backbones for e in self.executors]

    def preflight_parts(self, where: str) -> list[Part]:
        """Every model a cell calls and the base's retriever, each under the file that names it."""
        grid = self.grid()
        parts = model_parts(
            where, "backbones", {b: self.backbones[b] for b in dict.fromkeys(b for b, _ in grid)}
        )
        parts += model_parts(
            where, "executors", {e: self.executors[e] for e in dict.fromkeys(e for _, e in grid)}
        )
        parts += model_parts(where, "single_agents", self.single_agents)
        parts += model_parts(where, "no_retrieval", self.no_retrieval)
        if isinstance(self.answerer, ChatModelConfig):
            parts.append(Part(where, "answerer", self.answerer))
        base = _base_dict(self)
        base_where = self.base if isinstance(self.base, str) else f"{where} (base)"
        for i, source in enumerate(base.get("questions") or []):
            parts.append(Part(base_where, f"questions.{i}", QuestionSource.model_validate(source)))
        roles = [JUDGE_ROLE] + (["answerer"] if grid and self.answerer == "base" else [])
        base_models = base.get("models") or {}
        parts += model_parts(
            base_where,
            "models",
            {r: ChatModelConfig.model_validate(base_models[r]) for r in roles if r in base_models},
        )
        if (grid or self.single_agents) and base.get("retriever") and not base.get("build_index_from"):
            parts.append(Part(base_where, "retriever", RetrieverConfig.model_validate(base["retriever"])))
        return parts


def load_sweep_config(path: str | Path, sets: list[str] | None = None) -> SweepConfig:
    """Read a sweep YAML and apply `--set` items (`base.samples=1` reaches into the base config).

    A key the base config does not declare (`--set base.samplez=2`) is refused here: the cells
    fill in the base's models, so only unknown keys are errors of the base on its own."""
    sweep = load_config(SweepConfig, path, sets=sets)
    try:
        EvalConfig.model_validate(_base_dict(sweep))
    except ValidationError as exc:
        unknown = [
            {"type": err["type"], "loc": err["loc"], "input": err["input"]}
            for err in exc.errors()
            if err["type"] == "extra_forbidden"
        ]
        if unknown:
            # the base's own file, else the sweep that holds it (written there, or changed by --set)
            where = sweep.base if isinstance(sweep.base, str) else f"{path}: base"
            found = ValidationError.from_exception_data(exc.title, unknown)
            raise ConfigError(validation_message(where, found, EvalConfig)) from None
    return sweep


@dataclass
class Cell:
    name: str
    kind: CellKind
    backbone: str
    executor: str
    config: EvalConfig


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "cell"


def _base_dict(sweep: SweepConfig) -> dict[str, Any]:
    data = read_base(sweep.base)
    data.setdefault("output_dir", "unused")
    return data


def build_cells(sweep: SweepConfig) -> list[Cell]:
    """One EvalConfig per grid cell and per single-agent baseline."""
    base = _base_dict(sweep)
    base_models = {k: ChatModelConfig.model_validate(v) for k, v in (base.get("models") or {}).items()}
    judge = {JUDGE_ROLE: base_models[JUDGE_ROLE]} if JUDGE_ROLE in base_models else {}
    pipeline = driver_pipeline(base)
    driver = pipeline["driver"]
    out = sweep.cells_path
    cells: list[Cell] = []

    def make(name: str, mode: str, models: dict[str, ChatModelConfig], extra: dict[str, Any]) -> EvalConfig:
        return cell_config(
            base,
            f"sweep {sweep.name}, cell {name}",
            **extra,
            name=name,
            output_dir=str(out / _slug(name)),
            mode=mode,
            models={k: v.model_dump() for k, v in {**models, **judge}.items()},
        )

    for b, e in sweep.grid():
        if sweep.answerer == "base":
            if "answerer" not in base_models:
                raise ConfigError("sweep: answerer='base' but the base config has no answerer model")
            answerer = base_models["answerer"]
        elif sweep.answerer == "backbone":
            answerer = sweep.backbones[b]
        else:
            answerer = sweep.answerer
        models = {"backbone": sweep.backbones[b], "answerer": answerer, driver: sweep.executors[e]}
        name = f"{b}+{e}"
        cells.append(Cell(name, "pipeline", b, e, make(name, "pipeline", models, {"pipeline": pipeline})))
    for label, model in sweep.single_agents.items():
        name = f"single:{label}"
        cells.append(
            Cell(name, "single_agent", "", label, make(name, "single_agent", {SINGLE_AGENT_ROLE: model}, {}))
        )
    for label, model in sweep.no_retrieval.items():
        name = f"{NO_RETRIEVAL_PREFIX}{label}"
        cells.append(
            Cell(name, "no_retrieval", "", label, make(name, "no_retrieval", {ANSWERER_ROLE: model}, {}))
        )
    return cells


def _fingerprint(config: EvalConfig) -> str:
    """What a cached cell must match: its config and the content of its evaluation set."""
    data = config.model_dump(mode="json", exclude={"concurrency", "plots", "engine", "ray"})
    data["eval_sets"] = [
        ids_digest(read_ids(s.ids_file))
        for s in config.questions
        if s.ids_file and Path(s.ids_file).is_file()
    ]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class SweepResult(WrittenFiles):
    cells: list[tuple[Cell, EvalResults]]
    output_dir: Path
    ran: list[str]
    cached: list[str]

    FILES: ClassVar[dict[str, str]] = {
        "json": SWEEP_JSON,
        "markdown": SWEEP_MD,
        "pareto": PARETO_PNG,
        "pareto_latency": PARETO_LATENCY_PNG,
        "capacity": CAPACITY_PNG,
        "roles": ROLES_PNG,
    }

    def summary(self) -> str:
        lines = [f"sweep: {len(self.cells)} cells ({len(self.ran)} run, {len(self.cached)} cached)"]
        lines.append(sweep_markdown([(c.name, c.backbone, c.executor, r) for c, r in self.cells]).rstrip())
        lines += [f"  {k}: {v}" for k, v in self.files.items()]
        return "\n".join(lines)


def accuracy(results: EvalResults, metric: str) -> tuple[float, str]:
    """A cell's accuracy over every evaluated question (the paper's "Avg."), EM without verdicts."""
    value = results.average.get(metric)
    if value is None:
        return results.average.get("em") or 0.0, "em"
    return value, metric


def run_sweep(
    sweep: SweepConfig,
    *,
    pool: ModelPool | None = None,
    retriever: Retriever | None = None,
    progress: bool = True,
) -> SweepResult:
    """Run every cell (resumable, cached), then write sweep.json, sweep.md and the plots."""
    pool = pool or ModelPool()
    out = Path(sweep.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    done: list[tuple[Cell, EvalResults]] = []
    ran, cached = [], []
    for cell in build_cells(sweep):
        cell_dir = cell.config.out
        marker = cell_dir / CELL_FILE
        fp = _fingerprint(cell.config)
        if _is_finished(cell_dir, fp):
            done.append((cell, EvalResults.load_json(cell_dir / RESULTS_JSON)))
            cached.append(cell.name)
            logger.info("cell %s: cached", cell.name)
            _write_tables(sweep, out, done)
            continue
        run = run_eval(cell.config, pool=pool, retriever=retriever, progress=progress)
        if not run.failed:
            record = {
                "fingerprint": fp,
                "name": cell.name,
                "backbone": cell.backbone,
                "executor": cell.executor,
            }
            marker.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        done.append((cell, run.results))
        ran.append(cell.name)
        _write_tables(sweep, out, done)
    _write_plots(sweep, out, done)
    return SweepResult(done, out, ran, cached)


def _is_finished(cell_dir: Path, fingerprint: str) -> bool:
    marker = cell_dir / CELL_FILE
    if not marker.exists() or not (cell_dir / RESULTS_JSON).exists():
        return False
    return json.loads(marker.read_text(encoding="utf-8")).get("fingerprint") == fingerprint


def _write_tables(sweep: SweepConfig, out: Path, done: list[tuple[Cell, EvalResults]]) -> None:
    rows = [(c.name, c.backbone, c.executor, r) for c, r in done]
    write_markdown(f"## {sweep.name}\n\n" + sweep_markdown(rows, metric=sweep.per_dataset), out / SWEEP_MD)
    payload = {
        "name": sweep.name,
        "metric": sweep.metric,
        "cells": [
            {
                "name": c.name,
                "kind": c.kind,
                "backbone": c.backbone,
                "executor": c.executor,
                "results": r.to_dict(),
            }
            for c, r in done
        ],
    }
    write_json(out / SWEEP_JSON, payload)


def _write_plots(sweep: SweepConfig, out: Path, done: list[tuple[Cell, EvalResults]]) -> None:
    points, used = [], set()
    for c, r in done:
        if c.kind == "no_retrieval":  # no sub-agent at all: not a point of the trade-off
            continue
        acc, metric = accuracy(r, sweep.metric)
        used.add(metric)
        tokens = r.average.get("subagent_tokens") or 0.0
        backbone, executor = (c.backbone, c.executor) if c.kind == "pipeline" else ("", "")
        research = r.average.get("research_p50")
        points.append(Point(c.name, tokens, acc, backbone=backbone, executor=executor, research_s=research))
    if not points:
        return
    label = ("/".join(sorted(used)) or sweep.metric) + ", avg over questions"
    plot_pareto(points, out / PARETO_PNG, metric=label, title=f"{sweep.name}: accuracy vs sub-agent tokens")
    if any(p.research_s is not None for p in points):
        plot_pareto(points, out / PARETO_LATENCY_PNG, metric=label, x="research_s",
                    title=f"{sweep.name}: accuracy vs research time")  # fmt: skip
    if any(p.backbone for p in points):
        plot_capacity(
            points,
            out / CAPACITY_PNG,
            metric=label,
            backbones=list(sweep.backbones),
            executors=list(sweep.executors),
        )
    if sweep.role_curves is not None:
        curves = sweep.role_curves
        value = {(p.backbone, p.executor): p.accuracy for p in points if p.backbone}
        plot_role_curves(
            curves.scale,
            decomposition=[value.get(cell) for cell in curves.decomposition()],
            execution=[value.get(cell) for cell in curves.execution()],
            path=out / ROLES_PNG,
            metric=label,
            title=f"{sweep.name}: backbone varied (executor {curves.fixed_executor}) vs "
            f"executor varied (backbone {curves.fixed_backbone})",
        )

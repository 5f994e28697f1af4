"""Evaluation: build the evaluation set once, run benchmarks (resumable), aggregate mean@k
tables, sweep model pairs, plot."""

from executor_sft.configfile import apply_overrides
from executor_sft.data.idlist import read_ids
from executor_sft.eval.aggregate import EvalResults, GroupResult, Stat, summarize, summarize_file
from executor_sft.eval.config import (
    EvalConfig,
    MetricsConfig,
    QuestionSource,
    SingleAgentConfig,
    load_eval_config,
)
from executor_sft.eval.eval_set import EvalSet, EvalSetConfig, build_eval_set, load_eval_set_config
from executor_sft.eval.plots import Point, pareto_front, plot_capacity, plot_pareto, plot_summary
from executor_sft.eval.report import results_markdown, sweep_markdown
from executor_sft.eval.runner import EVAL_ENGINES, EvalRun, ensure_index, run_eval, select_questions
from executor_sft.eval.sweep import SweepConfig, SweepResult, build_cells, load_sweep_config, run_sweep

__all__ = [
    "EvalConfig",
    "EvalResults",
    "EvalSet",
    "EvalSetConfig",
    "EvalRun",
    "GroupResult",
    "MetricsConfig",
    "Point",
    "QuestionSource",
    "SingleAgentConfig",
    "Stat",
    "SweepConfig",
    "SweepResult",
    "apply_overrides",
    "build_cells",
    "build_eval_set",
    "ensure_index",
    "load_eval_config",
    "load_eval_set_config",
    "load_sweep_config",
    "pareto_front",
    "plot_capacity",
    "plot_pareto",
    "plot_summary",
    "read_ids",
    "results_markdown",
    "run_eval",
    "EVAL_ENGINES",
    "run_sweep",
    "select_questions",
    "summarize",
    "summarize_file",
    "sweep_markdown",
]

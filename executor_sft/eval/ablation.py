"""A filter ablation (`recipes/filter_ablation.py`, docs/filters.md "Ablating a filter"): one rollouts
file through several filter configurations, each variant's rows trained for the same optimizer steps
with one SFT config (more steps would mix the filter's effect with more training), each model scored
by the executor-level evaluation with the settings the rollouts were collected with. A variant's
`done.json` is read back while its key (rows, steps, SFT config, evaluation) is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from executor_sft.agents.pipeline import pipeline_config_of
from executor_sft.configfile import load_config, parse_trl_args, read_yaml
from executor_sft.errors import ConfigError, InputError, MissingFileError
from executor_sft.eval import executor_eval
from executor_sft.eval.executor_eval import ExecutorEvalResult, evaluate_executor, load_subqueries
from executor_sft.files import write_json, write_jsonl, write_text
from executor_sft.filters import FilterConfig, filter_episodes, iter_episodes_by_id, parse_episode
from executor_sft.llm.base import SamplingParams
from executor_sft.retrieval.config import RetrieverConfig
from executor_sft.safe_interrupt import run_async
from executor_sft.training.run_record import ResumeChangedError

DONE = "done.json"


class AblationEval(BaseModel):
    """The held-out sub-queries and how each trained executor answers them."""

    model_config = ConfigDict(extra="forbid")
    sub_queries: str
    limit: int | None = Field(None, ge=1)
    samples: int = Field(1, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    max_tokens: int = Field(64, ge=1)
    concurrency: int = Field(8, ge=1)
    seed: int = 0
    role: str = "student"
    retriever: RetrieverConfig
    build_index_from: str | None = None


class Variant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    filter: FilterConfig = Field(default_factory=FilterConfig)

    @field_validator("filter", mode="before")
    @classmethod
    def _from_file(cls, value: Any) -> Any:
        """A string is a filter YAML (what `filter_trajectories.py --config` reads)."""
        return read_yaml(value) if isinstance(value, str) else value


class AblationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    output_dir: str
    rollouts: str
    sft_config: str
    max_steps: int | None = Field(None, ge=1)
    variants: list[Variant] = Field(min_length=1)
    eval: AblationEval

    @model_validator(mode="after")
    def _distinct_names(self) -> AblationConfig:
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variants: names repeat ({names}); give each its own")
        return self


def load_ablation_config(path: str | Path, overrides: dict | None = None, sets: list[str] | None = None):
    """The validated config; every input it names must exist (one line naming the field if not)."""
    config = load_config(AblationConfig, path, overrides, sets)
    for field, value in [
        ("rollouts", config.rollouts),
        ("sft_config", config.sft_config),
        ("eval.sub_queries", config.eval.sub_queries),
        ("eval.build_index_from", config.eval.build_index_from),
    ]:
        if value is not None and not Path(value).is_file():
            raise MissingFileError(f"{path}: field '{field}': {value} not found; check the path")
    for field, problem in config.eval.retriever.preflight() if config.eval.build_index_from is None else ():
        raise ConfigError(f"{path}: field 'eval.retriever.{field}': {problem}")
    return config


def sft_arguments(config: AblationConfig, rows: Path, model_dir: Path, steps: int) -> tuple:
    """The SFT recipe's (script, training, model) arguments from `sft_config`, for one variant."""
    from executor_sft.sft.train import SFTScriptArguments, name_the_cpu_accelerator

    name_the_cpu_accelerator()
    from trl import ModelConfig, SFTConfig

    flags = ["--dataset_name", str(rows), "--output_dir", str(model_dir), "--max_steps", str(steps)]
    types = (SFTScriptArguments, SFTConfig, ModelConfig)
    return parse_trl_args(types, ["--config", config.sft_config, *flags])


def build_rows(config: AblationConfig, variant: Variant, folder: Path) -> dict[str, Any]:
    """Filter the rollouts with the variant's config into `folder/sft.jsonl` (and its report)."""
    result = filter_episodes(iter_episodes_by_id(config.rollouts), variant.filter)
    if not result.rows:
        raise InputError(
            f"{config.rollouts}: variant '{variant.name}' keeps no rows (excluded: "
            f"{result.report['exclusions']}); change its filter or drop the variant"
        )
    write_jsonl(folder / "sft.jsonl", result.rows)
    write_json(folder / "sft.report.json", result.report)
    text = "\n".join(json.dumps(r, sort_keys=True) for r in result.rows)
    strata = {k: v["records"] for k, v in result.report["strata"].items()}
    return {"rows": len(result.rows), "strata": strata, "sha256": hashlib.sha256(text.encode()).hexdigest()}


def equal_steps(row_counts: list[int], rows_per_step: int, max_steps: int | None) -> int:
    """The steps every variant trains: `max_steps`, else 2 epochs of the largest variant's rows."""
    return max_steps or math.ceil(2 * max(row_counts) / rows_per_step)


def run_ablation(config: AblationConfig, progress: bool = True) -> str:
    """Every variant's rows first (the step count needs the largest), then train and evaluate each;
    writes `results.json` and `results.md` and returns the markdown."""
    out = Path(config.output_dir)
    sub_queries = load_subqueries(config.eval.sub_queries, config.eval.limit)
    first = next(iter(iter_episodes_by_id(config.rollouts)), None)
    if first is None:
        raise InputError(f"{config.rollouts}: no episodes in the file; pass a collect_rollouts.py output")
    pipeline = pipeline_config_of(parse_episode(first.record, first.where))
    if config.eval.role not in pipeline.executor_roles:
        raise ConfigError(
            f"eval.role: '{config.eval.role}' is not a role of the rollouts {pipeline.executor_roles}"
        )
    sampling = SamplingParams(max_tokens=config.eval.max_tokens, temperature=config.eval.temperature)
    settings = pipeline.executor_settings(config.eval.role).replace(sampling=sampling)
    _, training, _ = sft_arguments(config, out / "rows", out / "model", 1)  # a bad SFT config ends here
    built = {v.name: build_rows(config, v, out / v.name) for v in config.variants}
    per_step = training.per_device_train_batch_size * training.gradient_accumulation_steps
    steps = equal_steps([b["rows"] for b in built.values()], per_step, config.max_steps)
    evaluation = (sub_queries * config.eval.samples, settings, [])
    results = [_variant(config, v.name, built[v.name], steps, evaluation, progress) for v in config.variants]
    rule = "set in the config" if config.max_steps else "2 epochs of the largest variant"
    markdown = results_markdown(results, steps, rule)
    write_json(out / "results.json", {"max_steps": steps, "steps_rule": rule, "variants": results})
    write_text(out / "results.md", markdown)
    return markdown


def _variant(config: AblationConfig, name: str, built: dict, steps: int, evaluation: tuple, progress) -> dict:
    """Train and evaluate one variant, or read its done file back when nothing it depends on changed."""
    folder = Path(config.output_dir) / name
    train = {"rows_sha256": built["sha256"], "max_steps": steps, "sft": read_yaml(config.sft_config)}
    key = json.loads(json.dumps({"train": train, "eval": config.eval.model_dump(mode="json")}, default=str))
    done = json.loads((folder / DONE).read_text(encoding="utf-8")) if (folder / DONE).is_file() else {}
    if done.get("key") == key:
        print(f"[ablation] {name}: finished before ({folder / DONE}); reused", file=sys.stderr)
        return done["result"]
    from executor_sft.sft.train import train_executor

    script, training, model = sft_arguments(config, folder / "sft.jsonl", folder / "model", steps)
    script.fresh = bool(done) and done.get("key", {}).get("train") != key["train"]  # trained on other rows
    try:
        trained = train_executor(script, training, model)
    except ResumeChangedError:
        raise ConfigError(
            f"{folder / 'model'}: holds a run trained with other settings; delete it to train variant "
            f"'{name}' again, or choose another --output_dir"
        ) from None
    state = json.loads((folder / "model" / "trainer_state.json").read_text(encoding="utf-8"))
    result = {
        "variant": name,
        "rows": built["rows"],
        "strata": built["strata"],
        "steps": state["global_step"],
    }
    result["train_loss"] = trained.metrics.get("train_loss")
    result["eval"] = _evaluate(config.eval, name, folder, *evaluation, progress).to_dict()
    write_json(folder / DONE, {"key": key, "result": result})
    return result


def _evaluate(cfg: AblationEval, name: str, folder: Path, runs, settings, retriever: list, progress: bool):
    """`runs` (each sub-query `samples` times) through the variant's model; `retriever` is built once."""
    import torch

    from executor_sft.eval.runner import ensure_index
    from executor_sft.llm import TransformersChatModel
    from executor_sft.retrieval.config import build_retriever

    if not retriever:
        if cfg.build_index_from is not None:
            ensure_index(cfg.retriever.index, cfg.build_index_from)
        retriever.append(build_retriever(cfg.retriever))
    torch.manual_seed(cfg.seed)
    model = TransformersChatModel(str(folder / "model"), name=name, max_batch_size=cfg.concurrency)
    try:
        return run_async(
            evaluate_executor(
                model, retriever[0], runs, settings, name=name, concurrency=cfg.concurrency,
                runs_path=folder / "eval.jsonl", show_progress=progress,
            )
        )  # fmt: skip
    finally:
        model.close()


def results_markdown(results: list[dict], steps: int, rule: str) -> str:
    """One row per variant: its rows, steps and train loss, then the executor evaluation's columns;
    then the same scores per sub-query type."""
    header, rule_line = ExecutorEvalResult.markdown_header().split("\n")
    scores = [_score(r["eval"]) for r in results]
    lines = [
        f"Filter ablation: {steps} optimizer steps per variant ({rule}); {scores[0].n} evaluation runs each.",
        "",
        header.replace("| model |", "| variant | SFT rows | steps | train loss |", 1),
        rule_line + "---|---|---|",
    ]
    for r, score in zip(results, scores, strict=True):
        loss = "-" if r["train_loss"] is None else f"{r['train_loss']:.4f}"
        row = score.markdown_row(r["variant"]).removeprefix(f"| {r['variant']} |")
        lines.append(f"| {r['variant']} | {r['rows']} | {r['steps']} | {loss} |{row}")
    if any(score.by_type for score in scores):
        lines += ["", executor_eval.markdown_table_by_type(scores, [r["variant"] for r in results])]
    return "\n".join(lines) + "\n"


def _score(saved: dict) -> ExecutorEvalResult:
    """An evaluation's scores back from `ExecutorEvalResult.to_dict()` (its runs stay in eval.jsonl)."""
    by_type = {t: ExecutorEvalResult(**s, seconds=0.0) for t, s in saved.get("by_type", {}).items()}
    return ExecutorEvalResult(**{k: v for k, v in saved.items() if k != "by_type"}, by_type=by_type)

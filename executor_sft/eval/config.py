"""Evaluation config: which questions, which system (pipeline or single agent), which models.

A YAML file maps onto `EvalConfig` one to one; unknown keys are errors that name the field.
Relative paths resolve against the working directory, like every recipe config of the
project (run recipes from the repository root).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from executor_sft.agents.config import PipelineConfig
from executor_sft.llm.base import SamplingParams
from executor_sft.llm.config import ModelConfig
from executor_sft.retrieval.config import RetrieverConfig

Mode = Literal["pipeline", "single_agent"]
SINGLE_AGENT_ROLE = "single_agent"
JUDGE_ROLE = "judge"


class QuestionSource(BaseModel):
    """One question file (anything `load_questions` reads) and how to subset it."""

    model_config = ConfigDict(extra="forbid")
    path: str
    split: str | None = None
    """Local files: keep rows whose `split` field equals this. Hub datasets: the split to load."""
    datasets: list[str] | None = None
    """Keep only these dataset labels."""
    limit: int | None = Field(None, ge=1)
    """At most this many questions per dataset (file order), after filtering."""
    dataset: str | None = None
    """Label for rows that carry no dataset field (default: the file stem)."""


class SingleAgentConfig(BaseModel):
    """Budget and protocol of the single-agent ("direct tool") baseline."""

    model_config = ConfigDict(extra="forbid")
    max_turns: int = Field(8, ge=1)
    max_searches: int | None = Field(None, ge=0)
    top_k: int = Field(3, ge=1)
    protocol: Literal["native", "tag"] = "native"
    sampling: SamplingParams | None = None
    """None: the model's own defaults (its ModelConfig temperature, max_tokens, ...)."""


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exclude_no_subquery: bool = False
    """Score only episodes where the backbone dispatched at least one sub-query (as the paper does)."""
    bucket_tokens: int = Field(10_000, ge=1)
    n_buckets: int = Field(10, ge=1)
    tokenizer: str | None = None
    """Tokenizer (path or offline alias) to count tokens of runs whose endpoint reported none."""


def _default_pipeline() -> PipelineConfig:
    return PipelineConfig(executor_roles=["executor"], driver="executor")


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "eval"
    output_dir: str
    mode: Mode = "pipeline"
    questions: list[QuestionSource] = Field(min_length=1)
    samples: int = Field(1, ge=1, description="k: samples per question (mean@k)")
    concurrency: int = Field(4, ge=1, description="episodes in flight at once")
    models: dict[str, ModelConfig]
    """Role -> model. Pipeline: backbone, answerer and every executor role; single agent:
    `single_agent`. An optional `judge` enables the LLM judge."""
    pipeline: PipelineConfig = Field(default_factory=_default_pipeline)
    single_agent: SingleAgentConfig = Field(default_factory=SingleAgentConfig)
    retriever: RetrieverConfig
    build_index_from: str | None = None
    """Corpus file: build a BM25 index into `retriever.index` when that directory has none."""
    judge_cache: str | None = None
    """JSONL verdict cache (default: <output_dir>/judge_cache.jsonl)."""
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    plots: bool = True

    @model_validator(mode="after")
    def _roles(self) -> EvalConfig:
        needed = self.required_roles()
        missing = [r for r in needed if r not in self.models]
        if missing:
            raise ValueError(
                f"models: no model for role(s) {missing} (mode={self.mode}); got {sorted(self.models)}"
            )
        extra = set(self.models) - set(needed) - {JUDGE_ROLE}
        if extra:
            raise ValueError(
                f"models: unused role(s) {sorted(extra)} for mode={self.mode}; expected {needed}"
            )
        if self.build_index_from is not None and self.retriever.index is None:
            raise ValueError("build_index_from needs retriever.index (the directory to build into)")
        return self

    def required_roles(self) -> list[str]:
        if self.mode == "single_agent":
            return [SINGLE_AGENT_ROLE]
        return ["backbone", "answerer", *self.pipeline.executor_roles]

    @property
    def out(self) -> Path:
        return Path(self.output_dir)


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{path}{line}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def validation_message(path: str | Path, exc: ValidationError) -> str:
    """One line per problem, naming the file and the dotted field."""
    lines = [f"{path}: invalid config"]
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        lines.append(f"  field '{where}': {err['msg']}")
    return "\n".join(lines)


def load_eval_config(path: str | Path, overrides: dict[str, Any] | None = None) -> EvalConfig:
    """Read an eval YAML, apply top-level overrides, validate (errors name the file and field)."""
    data = read_yaml(path)
    data.update(overrides or {})
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as exc:
        raise ValueError(validation_message(path, exc)) from None

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
from executor_sft.data.questions import Duplicates
from executor_sft.llm.base import SamplingParams
from executor_sft.llm.config import ModelConfig
from executor_sft.metrics.answer import Normalization
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
    duplicates: Duplicates = "keep"
    """Repeated ids: "keep" (distinct ids `<id>~<n>`; the paper counts repeats) or "drop"."""
    ids_file: str | None = None
    """An evaluation set (`eval_set.json` from recipes/build_eval_set.py, or one id per line):
    evaluate exactly these ids of this file, so every cell scores the same questions."""


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
    normalization: Normalization = "squad"
    """Answer normalisation for EM, cover-EM and F1 (rescored from each episode's answer)."""
    bucket_tokens: int = Field(10_000, ge=1)
    n_buckets: int = Field(10, ge=1)
    tokenizer: str | None = None
    """Tokenizer (path or offline alias) to count tokens of runs whose endpoint reported none."""

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "exclude_no_subquery" in data:
            raise ValueError(
                "exclude_no_subquery was removed (it scored each run on its own question set): "
                "build the evaluation set once with recipes/build_eval_set.py and set "
                "questions[].ids_file to its eval_set.json"
            )
        return data


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

    def sampled_roles(self) -> dict[str, float]:
        """Temperature each answer-producing role samples at (the judge is always greedy)."""
        if self.mode == "single_agent":
            sampling = self.single_agent.sampling
            temp = sampling.temperature if sampling else self.models[SINGLE_AGENT_ROLE].temperature
            return {SINGLE_AGENT_ROLE: temp}
        temps = {}
        for role in self.required_roles():
            sampling = self.pipeline.settings_for(role).sampling
            temps[role] = sampling.temperature if sampling else self.models[role].temperature
        return temps

    def identical_samples(self) -> bool:
        """True when samples > 1 but every role is greedy, so the k samples are copies."""
        return self.samples > 1 and all(t == 0 for t in self.sampled_roles().values())


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: config file not found; check the path (recipes run from the repository root)"
        )
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
    """One line naming the file and each problem's dotted field."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        problems.append(f"field '{where}': {err['msg']}")
    return f"{path}: invalid config: " + "; ".join(problems)


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply `dotted.key=value` overrides (values parsed as YAML) to a config mapping.

    A number indexes a list (`questions.0.limit=2`). A string met on the way (a sweep's
    `base: file.yaml`) is read as the YAML file it names, so `base.samples=1` reaches into it.
    """
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. samples=4")
        parts = key.split(".")
        node: Any = data
        for depth, part in enumerate(parts, start=1):
            if not isinstance(node, (dict, list)):
                raise ValueError(f"--set {key}: cannot descend into '{part}' (not a mapping or list)")
            if isinstance(node, list) and not (part.isdigit() and int(part) < len(node)):
                raise ValueError(f"--set {key}: '{part}' is not an index of a {len(node)}-item list")
            index: Any = int(part) if isinstance(node, list) else part
            if depth == len(parts):
                node[index] = yaml.safe_load(raw)
                break
            child = node[index] if isinstance(node, list) else node.get(part)
            if isinstance(child, str):
                child = read_yaml(child)
            elif child is None:
                child = {}
            node[index] = child
            node = child
    return data


def load_eval_config(
    path: str | Path, overrides: dict[str, Any] | None = None, sets: list[str] | None = None
) -> EvalConfig:
    """Read an eval YAML, apply top-level overrides and `--set` items, validate (errors name file and field)."""
    data = apply_overrides(read_yaml(path), sets)
    data.update(overrides or {})
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as exc:
        raise ValueError(validation_message(path, exc)) from None

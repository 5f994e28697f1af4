"""Evaluation config: which questions, which system (pipeline or single agent), which models.

A YAML file maps onto `EvalConfig` one to one; unknown keys are errors that name the field.
Relative paths resolve against the working directory, like every recipe config of the
project (run recipes from the repository root).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from executor_sft.agents.config import PipelineConfig, WrittenSampling
from executor_sft.agents.prompting import Prompts
from executor_sft.agents.settings import ExecutorSettings
from executor_sft.configfile import load_config
from executor_sft.data.selection import QuestionSource
from executor_sft.episode_runner import DEFAULT_MAX_ATTEMPTS
from executor_sft.llm.base import SamplingParams
from executor_sft.llm.config import ChatModelConfig
from executor_sft.metrics.answer import Normalization
from executor_sft.preflight import Part, model_parts
from executor_sft.ray_runner import RayConfig
from executor_sft.retrieval.config import RetrieverConfig
from executor_sft.runtime import check_roles

Mode = Literal["pipeline", "single_agent", "no_retrieval"]
"""pipeline: backbone -> executors -> answerer; single_agent: the direct-tool baseline;
no_retrieval: the answerer alone on the bare question (App. A's control, Tab. 6)."""
SINGLE_AGENT_ROLE = "single_agent"
ANSWERER_ROLE = "answerer"
JUDGE_ROLE = "judge"

# `questions:` entries are `executor_sft.data.QuestionSource` as it is: its defaults are
# evaluation's (repeated ids kept as `<id>~<n>`, `limit` per dataset).


class SingleAgentConfig(WrittenSampling):
    """Budget and protocol of the single-agent ("direct tool") baseline."""

    model_config = ConfigDict(extra="forbid")
    max_turns: int = Field(8, ge=1)
    max_searches: int | None = Field(None, ge=0)
    top_k: int = Field(3, ge=1)
    protocol: Literal["native", "tag"] = "native"
    sampling: SamplingParams | None = None
    """None: the model's own defaults (its ChatModelConfig temperature, max_tokens, ...); the keys
    written here override those defaults and the others keep the model's values."""

    def executor_settings(self, prompts: Prompts) -> ExecutorSettings:
        fields = ("max_turns", "max_searches", "top_k", "protocol", "sampling")
        return ExecutorSettings(prompts=prompts, **{f: getattr(self, f) for f in fields})


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    normalization: Normalization = "squad"
    """Answer normalisation for EM, cover-EM and F1 (rescored from each episode's answer)."""
    bucket_tokens: int = Field(10_000, ge=1)
    n_buckets: int = Field(10, ge=1)
    cer_tokens: Literal["calls", "context", "completion"] = "calls"
    """CER-C's token axis (`executor_sft.metrics.cer`): `calls` (ours: every call's prompt counted
    again), `context` (the blog's reading: the context consumed), `completion` (generated only)."""
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
    engine: str = "in_process"
    """`executor_sft.eval.EVAL_ENGINES`: in_process (one event loop here) or ray (actors over a Ray
    cluster, `ray`; episodes stream back here, the only writer of the episodes file)."""
    ray: RayConfig = Field(default_factory=RayConfig)
    models: dict[str, ChatModelConfig]
    """Role -> model. Pipeline: backbone, answerer and every executor role; single agent:
    `single_agent`; no retrieval: `answerer`. An optional `judge` enables the LLM judge."""
    pipeline: PipelineConfig = Field(default_factory=_default_pipeline)
    single_agent: SingleAgentConfig = Field(default_factory=SingleAgentConfig)
    retriever: RetrieverConfig | None = None
    """Required except in mode no_retrieval, which ignores it."""
    build_index_from: str | None = None
    """Corpus file: build a BM25 index into `retriever.index` when that directory has none."""
    judge_cache: str | None = None
    """JSONL verdict cache (default: <output_dir>/judge_cache.jsonl)."""
    llm_cache: bool = True
    """Answer repeated greedy (temperature 0) model requests from a JSONL cache, so a resumed run
    sends no request twice (`executor_sft.llm.request_cache`); the judge keeps its own cache."""
    llm_cache_path: str | None = None
    """The request cache file (default: <output_dir>/llm_cache.jsonl)."""
    max_attempts: int = Field(DEFAULT_MAX_ATTEMPTS, ge=1)
    """Tries per episode across resumes: a failed episode (endpoint or retrieval server down past its
    retries, disk full) is not stored and the next run retries it, until it has failed this often;
    then it is stored as a final error (`executor_sft.episode_runner`)."""
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    plots: bool = True
    wait_for_lock: bool = False
    """When another process is writing this output's episodes, wait for it instead of failing."""
    accept_system_change: bool = False
    """Add episodes to an output that holds another system's (`runner.system_record`); refused without it."""

    @model_validator(mode="after")
    def _roles(self) -> EvalConfig:
        needed = self.required_roles()
        check_roles(self.models, needed, note=f" (mode={self.mode})")
        extra = set(self.models) - set(needed) - {JUDGE_ROLE}
        if extra:
            raise ValueError(
                f"models: unused role(s) {sorted(extra)} for mode={self.mode}; expected {needed}"
            )
        if self.retriever is None and self.needs_retriever:
            raise ValueError(f"retriever: required for mode={self.mode}")
        if self.build_index_from is not None and (self.retriever is None or self.retriever.index is None):
            raise ValueError("build_index_from needs retriever.index (the directory to build into)")
        # `pipeline.roles.<role>.sampling` keys over `models.<role>` sampling fields, not instead of them
        self.pipeline = self.pipeline.with_model_sampling({r: m.sampling() for r, m in self.models.items()})
        if self.mode == "single_agent":
            self.single_agent = self.single_agent.with_sampling_over(
                self.models[SINGLE_AGENT_ROLE].sampling()
            )
        return self

    def required_roles(self) -> list[str]:
        if self.mode == "single_agent":
            return [SINGLE_AGENT_ROLE]
        if self.mode == "no_retrieval":
            return [ANSWERER_ROLE]
        return ["backbone", ANSWERER_ROLE, *self.pipeline.executor_roles]

    @property
    def needs_retriever(self) -> bool:
        return self.mode != "no_retrieval"

    def preflight_parts(self, where: str) -> list[Part]:
        """What `executor_sft.preflight` checks before this evaluation loads anything: its question
        files, its models, and its retriever unless the mode has none or the run builds the index."""
        parts = [Part(where, f"questions.{i}", source) for i, source in enumerate(self.questions)]
        parts += model_parts(where, "models", self.models)
        if self.needs_retriever and self.retriever is not None and self.build_index_from is None:
            parts.append(Part(where, "retriever", self.retriever))
        return parts

    @property
    def out(self) -> Path:
        return Path(self.output_dir)

    def llm_cache_file(self) -> Path | None:
        """Where the request cache lives, or None when `llm_cache` is off."""
        if not self.llm_cache:
            return None
        return Path(self.llm_cache_path) if self.llm_cache_path else self.out / "llm_cache.jsonl"

    def sampled_roles(self) -> dict[str, float]:
        """Temperature each answer-producing role samples at (the judge is always greedy)."""
        if self.mode == "single_agent":
            sampling = self.single_agent.sampling
            temp = sampling.temperature if sampling else self.models[SINGLE_AGENT_ROLE].temperature
            return {SINGLE_AGENT_ROLE: temp}
        temps = {}
        for role in self.required_roles():
            sampling = self.pipeline.sampling_for(role)
            temps[role] = sampling.temperature if sampling else self.models[role].temperature
        return temps

    def identical_samples(self) -> bool:
        """True when samples > 1 but every role is greedy, so the k samples are copies."""
        return self.samples > 1 and all(t == 0 for t in self.sampled_roles().values())


def load_eval_config(
    path: str | Path, overrides: dict[str, Any] | None = None, sets: list[str] | None = None
) -> EvalConfig:
    """Read an eval YAML, apply top-level overrides and `--set` items, validate (errors name file and field)."""
    return load_config(EvalConfig, path, overrides, sets)

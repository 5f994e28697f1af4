"""Collection config: one YAML file maps onto `CollectConfig` (unknown keys are errors)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from executor_sft.agents.config import CounterfactualConfig, PipelineConfig
from executor_sft.configfile import FROM_FILE, load_config
from executor_sft.data.questions import Duplicates
from executor_sft.data.selection import LimitPer
from executor_sft.data.selection import QuestionSource as BaseQuestionSource
from executor_sft.episode_runner import DEFAULT_MAX_ATTEMPTS, WorkItem, attempts_path, work_items
from executor_sft.errors import OutputError
from executor_sft.files import check_output_dir
from executor_sft.llm.config import ChatModelConfig
from executor_sft.preflight import Part, model_parts
from executor_sft.ray_runner import RayConfig
from executor_sft.retrieval.config import RetrieverConfig
from executor_sft.retrieval.manifest import MANIFEST_NAME, Manifest, check_corpus
from executor_sft.runtime import Runtime, check_roles
from executor_sft.schema import Question, Role
from executor_sft.store import EpisodeStore, check_jsonl
from executor_sft.urls import redact


class CollectQuestionSource(BaseQuestionSource):
    """`executor_sft.data.QuestionSource` with collection's defaults.

    Training collection drops repeated ids (the first row of each is kept, with a warning: a
    repeat adds no new trajectory) and `limit` counts the whole source (the first N questions),
    where evaluation keeps repeats and limits per dataset. Either can still be set per config.
    """

    duplicates: Duplicates = "drop"
    limit_per: LimitPer = "source"


class CollectionModeConfig(BaseModel):
    """How executor roles share episodes (docs/rollout.md, "Collection and outcome modes").

    `shadow` (default): one episode per (question, sample); the driver's reports feed the
    backbone and every other executor role runs on the same sub-queries as a shadow.
    `separate`: one episode per (question, sample, executor role), each role driving its own
    episodes under the same backbone (ours: the paper does not say how its rollouts ran; Tab. 4's
    different invocation counts per sub-agent, 6,348 and 6,189, suggest this); a run's
    outcome is its own episode's final answer.
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["shadow", "separate"] = "shadow"


class CollectConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    questions: CollectQuestionSource
    retriever: RetrieverConfig
    models: dict[str, ChatModelConfig] = Field(default_factory=dict)
    """Role -> model: backbone, answerer, every executor role, and optionally judge. A config file
    names them all; a config built in code may name none and hand its own over (`collect(config,
    models=...)`)."""
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    counterfactual: CounterfactualConfig = Field(default_factory=CounterfactualConfig)
    collection: CollectionModeConfig = Field(default_factory=CollectionModeConfig)
    """`collection.mode`: shadow (default) or separate; outcomes are set by `pipeline.outcome.mode`."""
    samples_per_question: int = Field(default=1, ge=1)
    concurrency: int = Field(default=16, ge=1)
    """Episodes in flight at once; each runs its executor roles and sub-queries concurrently too."""
    output_dir: str = "outputs/rollouts"
    num_shards: int = Field(default=1, ge=1)
    shard_index: int = Field(default=0, ge=0)
    engine: str = "in_process"
    """`executor_sft.rollout.ENGINES`: in_process (one event loop here) or ray (actors over a Ray
    cluster, `ray`); a `module:attr` path names your own. More machines without Ray: shards
    (`num_shards`, `shard_index`), merged with `collect_rollouts.py merge`."""
    ray: RayConfig = Field(default_factory=RayConfig)
    """The cluster and the split of work for `engine: ray` (docs/scale.md)."""
    llm_cache: bool = True
    """Answer repeated greedy (temperature 0) model requests from a cache kept beside the rollouts,
    so a resumed or repeated run makes no call twice (`executor_sft.llm.request_cache`)."""
    llm_cache_path: str | None = None
    """The cache file (default: `<rollouts stem>.llm_cache.jsonl` beside the rollouts file)."""
    wait_for_lock: bool = False
    """When another process is writing the rollouts file, wait for it instead of failing at once."""
    accept_system_change: bool = False
    """Resume a rollouts file written by another system (`system_record`) or schema version, and
    record the change beside it (`<stem>.system.json`); without it such a resume is refused."""
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1)
    """Tries per episode across resumes: an episode that failed (endpoint or retrieval server down
    past its retries, disk full) is not stored and is retried by the next run until it has failed
    this often; then it is stored as a final error (`executor_sft.episode_runner`)."""
    attempts_path: str | None = None
    """The failed-attempts log (default: `<rollouts stem>.attempts.jsonl` beside the rollouts file)."""

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> CollectConfig:
        if self.shard_index >= self.num_shards:
            raise ValueError(f"shard_index {self.shard_index} must be < num_shards {self.num_shards}")
        if self.models or (info.context or {}).get(FROM_FILE):
            check_roles(self.models, self.required_roles())
        # `pipeline.roles.<role>.sampling` keys over `models.<role>` sampling fields, not instead of them
        self.pipeline = self.pipeline.with_model_sampling({r: m.sampling() for r, m in self.models.items()})
        return self

    def required_roles(self) -> list[str]:
        return [Role.BACKBONE, Role.ANSWERER, *self.pipeline.executor_roles]

    def drivers(self) -> list[str | None]:
        """The driver of each episode per (question, sample): None (shadow: the pipeline's driver,
        with shadows), or every executor role in turn (separate)."""
        if self.collection.mode == "separate":
            return list(self.pipeline.executor_roles)
        return [None]

    def work_items(self, questions: Iterable[Question]) -> list[WorkItem]:
        """Every episode this config collects over `questions`, in order."""
        return work_items(questions, self.samples_per_question, self.drivers())

    def system_record(self) -> dict[str, Any]:
        """What defines the collected system, for `EpisodeStore(system=...)`: one file, one system.

        Models by their `identity()` (endpoints and timeouts left out; their sampling is in the
        pipeline, where the config merges it), the pipeline, counterfactuals, collection mode and
        the retriever less its cache and transport settings, and the content hash of every prompt
        read from a file. Questions, samples and run settings
        are left out: adding questions or samples to a collection keeps its system.
        """
        data = self.model_dump(mode="json", include={"pipeline", "counterfactual", "collection"})
        data["models"] = {role: json.loads(m.identity()) for role, m in sorted(self.models.items())}
        data["retriever"] = self.retriever.model_dump(
            mode="json", exclude={"cache", "timeout_s", "max_retries"}
        )
        if data["retriever"].get("url"):  # a password written in it never reaches disk
            data["retriever"]["url"] = redact(data["retriever"]["url"])
        if digests := self.pipeline.prompts.file_digests():  # prompt files by content, not only path
            data["prompt_files"] = digests
        return data

    def runtime(self, **given: Any) -> Runtime:
        """This collection's models, retriever and judge (`Runtime.build`); `given` holds objects or
        factories (`models`, `retriever`, `judge`) that replace what the config describes."""
        judge_cache = self.rollouts_path.with_name(self.rollouts_path.stem + ".judge_cache.jsonl")
        return Runtime.build(
            self.models,
            self.retriever,
            llm_cache=self.llm_cache_file(),
            judge_cache=judge_cache,  # verdicts persist beside the rollouts: a resume never re-judges
            **given,
        )

    def open_store(self) -> EpisodeStore:
        """The rollouts file for writing: its writer lock taken and its system checked."""
        return EpisodeStore(
            self.rollouts_path,
            system=self.system_record(),
            accept_system_change=self.accept_system_change,
            wait_for_lock=self.wait_for_lock,
        )

    def llm_cache_file(self) -> Path | None:
        """Where the request cache lives, or None when `llm_cache` is off."""
        if not self.llm_cache:
            return None
        if self.llm_cache_path is not None:
            return Path(self.llm_cache_path)
        return self.rollouts_path.with_name(self.rollouts_path.stem + ".llm_cache.jsonl")

    def attempts_file(self) -> Path:
        return (
            Path(self.attempts_path) if self.attempts_path is not None else attempts_path(self.rollouts_path)
        )

    def preflight_parts(self, where: str) -> list[Part]:
        """What `executor_sft.preflight` checks before collection loads anything: the questions file,
        the models and the retriever."""
        return [
            Part(where, "questions", self.questions),
            *model_parts(where, "models", self.models),
            Part(where, "retriever", self.retriever),
        ]

    @property
    def rollouts_path(self) -> Path:
        name = "rollouts.jsonl"
        if self.num_shards > 1:
            name = f"rollouts-{self.shard_index:05d}-of-{self.num_shards:05d}.jsonl"
        return Path(self.output_dir) / name


def load_collect_config(
    path: str | Path, overrides: dict[str, Any] | None = None, sets: list[str] | None = None
) -> CollectConfig:
    """Read a YAML config, apply `--set` items then top-level overrides; errors are one line
    naming the file and the offending field path."""
    return load_config(CollectConfig, path, overrides, sets)


def check_inputs(config: CollectConfig) -> None:
    """Check what a run reads and writes besides the config before any model or index loads.

    The index (built from the config's corpus, where both are there), the rollouts file a resume
    appends to (no damaged line before the last), and that the outputs can be written there (not
    under a file, not on a read-only disk); raises a `UserError` naming the file.
    """
    check_outputs(config)
    index, corpus = config.retriever.index, config.retriever.corpus
    built = index is not None and (Path(index) / MANIFEST_NAME).is_file()
    if built and corpus is not None and Path(corpus).is_file():  # else the preflight names what is missing
        check_corpus(Manifest.load(index), Path(corpus), index)
    check_jsonl(config.rollouts_path)


def check_outputs(config: CollectConfig) -> None:
    """The rollouts file (and the request cache) can be appended to where the config puts them."""
    outputs = (
        (config.rollouts_path, "output_dir"),
        (config.llm_cache_file(), "llm_cache_path"),
        (config.attempts_file(), "attempts_path"),
    )
    for path, field in outputs:
        if path is None:
            continue
        if path.is_dir():
            raise OutputError(None, f"{path}: is a directory, not a JSONL file: choose another {field}")
        check_output_dir(path.parent, field)

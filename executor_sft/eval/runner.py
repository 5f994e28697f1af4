"""Run an evaluation: questions x k samples through the pipeline (or single agent), resumably.

Episodes go to `<output_dir>/episodes.jsonl` through the crash-safe `EpisodeStore`: a killed
run resumes where it stopped (finished `episode_id`s are skipped) and nothing is duplicated.
Models and the retriever are built only when work is pending, so re-running a finished
evaluation just re-aggregates. A run that would mix systems in one store (different models,
pipeline, retriever or mode than the store was started with: `EpisodeStore(system=...)`, as
in collection) is refused, and so is a second process writing the same output.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from executor_sft.agents.calls import INFRASTRUCTURE_ERRORS
from executor_sft.data.idlist import ids_digest
from executor_sft.data.selection import select_questions
from executor_sft.episode_runner import RunReport, WorkItem, run_episodes, work_items
from executor_sft.errors import MissingFileError
from executor_sft.eval.aggregate import EvalResults, summarize
from executor_sft.eval.config import ANSWERER_ROLE, SINGLE_AGENT_ROLE, EvalConfig
from executor_sft.eval.report import judge_warning, results_markdown, write_markdown
from executor_sft.llm.base import ChatModel
from executor_sft.llm.config import api_keys
from executor_sft.llm.pool import ModelPool
from executor_sft.ray_runner import ActorWork, run_episodes_ray
from executor_sft.registry import Registry
from executor_sft.retrieval.base import Retriever
from executor_sft.runtime import Runtime
from executor_sft.safe_interrupt import run_async
from executor_sft.schema import Episode, Question
from executor_sft.store import EpisodeStore
from executor_sft.urls import redact

logger = logging.getLogger(__name__)

EPISODES_FILE = "episodes.jsonl"
RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
SUMMARY_PNG = "summary.png"


def ensure_index(index_dir: str | Path, corpus: str | Path) -> Path:
    """Build a BM25 index over `corpus` into `index_dir` unless one is there (atomic rename)."""
    index_dir = Path(index_dir)
    if (index_dir / "manifest.json").exists():
        return index_dir
    from executor_sft.retrieval.build import build_index

    if not Path(corpus).exists():
        raise MissingFileError(f"build_index_from: corpus not found: {corpus}")
    tmp = index_dir.with_name(f"{index_dir.name}.tmp-{os.getpid()}")
    logger.info("building a BM25 index over %s into %s", corpus, index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    result = build_index(corpus, tmp, bm25=True)
    logger.info(result.summary())
    try:
        tmp.rename(index_dir)
    except OSError:  # another process finished first: keep its index
        shutil.rmtree(tmp, ignore_errors=True)
    return index_dir


def system_record(config: EvalConfig) -> dict[str, Any]:
    """What defines the evaluated system; episodes of different systems never share a store.

    Every model by its `identity()`, the judge included (its verdicts are stored with the
    episodes), as collection records them: endpoints, timeouts, routing and transport options
    (a new one included) change how a model is reached, not what it answers. Every prompt read
    from a file enters by its content's hash, so a file edited in place is a changed system.
    """
    data = config.model_dump(mode="json", include={"mode", "retriever"})
    data["models"] = {role: json.loads(m.identity()) for role, m in sorted(config.models.items())}
    data["retriever"] = (
        {k: v for k, v in (data["retriever"] or {}).items() if k not in ("cache", "timeout_s", "max_retries")}
        if config.needs_retriever
        else None
    )
    if data["retriever"] and data["retriever"].get("url"):  # a password written in it never reaches disk
        data["retriever"]["url"] = redact(data["retriever"]["url"])
    data["system"] = (
        config.single_agent.model_dump(mode="json")
        if config.mode == "single_agent"
        else config.pipeline.model_dump(mode="json")
    )
    if digests := config.pipeline.prompts.file_digests():  # the judge's too, in every mode
        data["prompt_files"] = digests
    return data


class WrittenFiles:
    """What a run wrote: `files` maps each name in `FILES` to its path under `output_dir`, where it exists."""

    FILES: ClassVar[dict[str, str]] = {}
    output_dir: Path

    @property
    def files(self) -> dict[str, Path]:
        return {k: self.output_dir / v for k, v in self.FILES.items() if (self.output_dir / v).exists()}


@dataclass
class EvalRun(WrittenFiles):
    """What `run_eval` did and where it wrote it."""

    results: EvalResults
    output_dir: Path
    ran: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    episodes: list[Episode] = field(default_factory=list, repr=False)
    """The episodes scored: the config's questions and samples (the file may hold others)."""

    FILES: ClassVar[dict[str, str]] = {
        "episodes": EPISODES_FILE,
        "results_json": RESULTS_JSON,
        "results_md": RESULTS_MD,
        "plot": SUMMARY_PNG,
    }

    def summary(self) -> str:
        a = self.results.average

        def pct(key: str) -> str:
            return "–" if a.get(key) is None else f"{100 * a[key]:.1f}"

        tokens = "–" if a.get("subagent_tokens") is None else f"{a['subagent_tokens']:,.0f}"
        lines = [
            f"{self.results.name}: {self.ran} episodes run, {self.skipped} already done, "
            f"{len(self.failed)} failed, {self.seconds:.0f}s",
            f"  avg EM {pct('em')}  cover-EM {pct('cover_em')}  F1 {pct('f1')}  judge {pct('judge')}  "
            f"sub-agent tokens/q {tokens}  "
            f"CER-C {pct('cer_c')}  no-sub-query {pct('no_subquery_share')}%",
        ]
        if warning := judge_warning(self.results):
            lines.append(f"  {warning}")
        if self.failed:
            lines.append(
                f"  failed (rerun to retry): {', '.join(self.failed[:5])}{' ...' if len(self.failed) > 5 else ''}"
            )
        lines += [f"  {k}: {v}" for k, v in self.files.items()]
        return "\n".join(lines)


def _load_tokenizer(spec: str | None) -> Any:
    if spec is None:
        return None
    from executor_sft.llm.backends import load_tokenizer as load

    return load(spec)


def build_runtime(config: EvalConfig, pool: ModelPool | None = None, **given: Any) -> Runtime:
    """This evaluation's models, retriever and judge (`Runtime.build`), or the `given` objects
    (`models`, `retriever`); the BM25 index is built first where `build_index_from` asks for it."""
    if config.needs_retriever and config.build_index_from is not None and given.get("retriever") is None:
        ensure_index(config.retriever.index, config.build_index_from)
    return Runtime.build(
        config.models,
        config.retriever if config.needs_retriever else None,
        llm_cache=config.llm_cache_file(),
        judge_cache=config.judge_cache or config.out / "judge_cache.jsonl",
        judge_prompt=config.pipeline.prompts.get("judge"),
        pool=pool,
        **{k: v for k, v in given.items() if v is not None},
    )


def _make_run_one(config: EvalConfig, runtime: Runtime) -> Callable[[WorkItem], Awaitable[Episode]]:
    """`run_one` for the episode runner: the pipeline, or the single agent, on one (question, sample)."""
    from executor_sft.agents import run_episode, run_single_agent
    from executor_sft.agents.no_retrieval import run_no_retrieval

    models, retriever, judge = runtime.models, runtime.retriever, runtime.judge
    single_agent = config.single_agent.executor_settings(config.pipeline.prompts)

    def run_one(item: WorkItem) -> Awaitable[Episode]:
        """The item's episode in this mode (its coroutine: nothing here waits)."""
        if config.mode == "single_agent":
            return run_single_agent(
                models[SINGLE_AGENT_ROLE],
                retriever,
                item.question,
                single_agent,
                sample_index=item.sample,
                judge=judge,
            )
        if config.mode == "no_retrieval":
            return run_no_retrieval(
                models[ANSWERER_ROLE],
                item.question,
                prompts=config.pipeline.prompts,
                sampling=config.pipeline.sampling_for(ANSWERER_ROLE),
                sample_index=item.sample,
                judge=judge,
            )
        return run_episode(item.question, models, retriever, config.pipeline, item.sample, judge=judge)

    return run_one


EvalEngine = Callable[..., RunReport]
"""`engine(config, work, store, progress=..., pool=..., models=..., retriever=...)`."""
EVAL_ENGINES: Registry[EvalEngine] = Registry("evaluation engine")


@EVAL_ENGINES.register("in_process")
def in_process(
    config: EvalConfig, work: list[WorkItem], store: EpisodeStore, *, progress: bool = True, **given: Any
) -> RunReport:
    runtime = build_runtime(config, **given)
    with runtime.cached_calls():
        return run_async(
            run_episodes(
                work,
                _make_run_one(config, runtime),
                store,
                concurrency=config.concurrency,
                progress={"desc": config.name} if progress else None,
                max_attempts=config.max_attempts,
                expected_failures=INFRASTRUCTURE_ERRORS,
            )
        )


def ray_actor_work(config_json: str) -> ActorWork:
    """On a Ray actor: the config's models and retriever built on that node (the index path must
    exist there); the judge cache in a scratch directory and no request cache (no shared disk)."""
    scratch = tempfile.mkdtemp(prefix="executor_sft_eval_")
    config = EvalConfig.model_validate_json(config_json).model_copy(
        update={"output_dir": scratch, "judge_cache": None, "llm_cache": False}
    )
    return ActorWork(_make_run_one(config, build_runtime(config)), expected_failures=INFRASTRUCTURE_ERRORS)


@EVAL_ENGINES.register("ray")
def on_ray(
    config: EvalConfig, work: list[WorkItem], store: EpisodeStore, *, progress: bool = True, **given: Any
) -> RunReport:
    if given.get("models") is not None or given.get("retriever") is not None:
        raise ValueError("engine ray builds models and retriever on each actor from the config; pass neither")
    report = run_async(
        run_episodes_ray(
            work,
            functools.partial(ray_actor_work, config.model_dump_json()),
            store,
            config.ray,
            concurrency=config.concurrency,
            progress={"desc": f"{config.name} (ray)"} if progress else None,
            max_attempts=config.max_attempts,
            env=api_keys(config.models.values()),
        )
    )
    if report.lost_actors:
        logger.warning(
            "%s: %d Ray actors lost; %d episodes re-queued", config.name, report.lost_actors, report.requeued
        )
    return report


def run_eval(
    config: EvalConfig,
    *,
    models: Mapping[str, ChatModel] | None = None,
    retriever: Retriever | None = None,
    pool: ModelPool | None = None,
    progress: bool = True,
) -> EvalRun:
    """Run (or resume) an evaluation and write episodes.jsonl, results.json, results.md, summary.png.

    `models` / `retriever` replace the configured ones (tests, or objects shared by a sweep);
    `pool` shares loaded models across calls.
    """
    start = time.perf_counter()
    out = config.out
    if config.identical_samples():
        logger.warning(
            "%s: samples=%d at temperature 0 in every role (%s): the samples are identical, so "
            "mean@%d is mean@1; set a temperature > 0",
            config.name,
            config.samples,
            ", ".join(config.sampled_roles()),
            config.samples,
        )
    questions = select_questions(config.questions)
    work = work_items(questions, config.samples)
    wanted = {item.episode_id for item in work}
    with EpisodeStore(
        out / EPISODES_FILE,
        system=system_record(config),
        accept_system_change=config.accept_system_change,
        wait_for_lock=config.wait_for_lock,
    ) as store:
        pending = sum(item.episode_id not in store for item in work)
        report = RunReport(skipped=len(work) - pending)
        if pending:
            engine = EVAL_ENGINES.get(config.engine)
            report = engine(
                config, work, store, progress=progress, pool=pool, models=models, retriever=retriever
            )
        episodes = [e for e in store if e.episode_id in wanted]
    failed = [episode_id for episode_id, _ in report.failed] + report.not_started
    results = summarize(
        episodes,
        config.name,
        normalization=config.metrics.normalization,
        bucket_tokens=config.metrics.bucket_tokens,
        n_buckets=config.metrics.n_buckets,
        cer_tokens=config.metrics.cer_tokens,
        tokenizer=_load_tokenizer(config.metrics.tokenizer),
        meta=_meta(config, questions, episodes, failed),
        passages=_passage_text(config),
    )
    results.save_json(out / RESULTS_JSON)
    write_markdown(results_markdown(results), out / RESULTS_MD)
    if config.plots and episodes:
        from executor_sft.eval.plots import plot_summary

        plot_summary(results, out / SUMMARY_PNG)
    return EvalRun(
        results=results,
        output_dir=out,
        ran=report.written,
        skipped=report.skipped,
        failed=failed,
        seconds=time.perf_counter() - start,
        episodes=episodes,
    )


def _passage_text(config: EvalConfig) -> Callable[[str], str | None] | None:
    """Passage texts for the answer-bearing CER-C: the local index's passages (none from a server)."""
    index = config.retriever.index if config.needs_retriever and config.retriever else None
    if index is None or not (Path(index) / "docs.arrow").exists():
        return None
    from executor_sft.retrieval.corpus import Corpus

    return Corpus.load(Path(index) / "docs.arrow").contents_of


def _meta(
    config: EvalConfig, questions: list[Question], episodes: list[Episode], failed: list[str]
) -> dict[str, Any]:
    ids_files = [s.ids_file for s in config.questions if s.ids_file]
    return {
        "mode": config.mode,
        "models": {role: m.label() for role, m in config.models.items()},
        "questions": len(questions),
        "question_ids": ids_digest([q.id for q in questions]),
        "eval_set": ", ".join(ids_files) or None,
        "samples": config.samples,
        "concurrency": config.concurrency,
        "identical_samples": config.identical_samples(),
        "episodes": len(episodes),
        "failed": len(failed),
        "stop_reasons": dict(Counter(e.stop_reason for e in episodes)),
    }

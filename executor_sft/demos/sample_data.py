"""The project's one generator of sample data: world -> BM25 -> scripted collection -> filter.

`make_sample_data(out)` is what `recipes/make_sample_data.py` runs to write the committed
`data/`; `recipes/demo.py` reuses its pieces (index, collection, filter) with a real student.

Steps: a small fictional world (`write_world`) -> a BM25 index of its corpus (in the cache,
not in the output) -> `executor_sft.rollout.collect` over the train questions with scripted
roles (teacher, student, backbone, answerer, judge) and counterfactual re-runs ->
`rollouts.jsonl` -> `executor_sft.filters.filter_episodes` -> `sft.jsonl` and its composition
report `sft.report.json` (the name the SFT recipe looks for beside the data).

The student here is the *scripted* student (one search, no reformulation), so the sample is
made in seconds without any model. Same arguments, same bytes, every file. What the clock
measured (search timings, the research-phase time, model calls' `latency_s` and `t_start`) is
dropped or set to 0 in the sample: on a scripted run over a toy BM25 index it measures nothing. Collection
runs one episode at a time so the file order, and hence the filter's first-in-file-order
dedupe, is fixed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from executor_sft.cache import cache_dir, cache_key, cached_entry
from executor_sft.safe_interrupt import run_async
from executor_sft.synthetic import TEACHER_EXTRA_SEARCH_RATE
from executor_sft.versions import library_versions

WORLD_DIR = "world"
ROLLOUTS = "rollouts.jsonl"
SFT = "sft.jsonl"
SFT_REPORT = "sft.report.json"
PROVENANCE = "provenance.json"


@dataclass
class SampleConfig:
    """What the sample is made of; the defaults produce the committed data/."""

    seed: int = 0
    entities: int = 300
    questions: int = 50
    collect_questions: int | None = 36
    """Train questions to collect (None: all). Bounds the size of rollouts.jsonl (~50 KB/episode)."""
    max_rounds: int = 5
    """Backbone rounds: 4-hop questions need >= 5 (one hop per round, then a stop)."""
    max_turns: int = 3
    top_k: int = 3
    teacher_extra_search_rate: float = TEACHER_EXTRA_SEARCH_RATE
    """Share of sub-queries where the scripted teacher searches again without need (ours, sized to Tab. 4)."""


@dataclass
class SampleResult:
    out: Path
    world: Path
    rollouts: Path
    sft: Path
    report: Path
    episodes: int
    rows: int
    strata: dict[str, int]
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        strata = ", ".join(f"{k}={v}" for k, v in self.strata.items())
        times = " ".join(f"{k}={v:.1f}s" for k, v in self.seconds.items())
        return f"{self.episodes} episodes -> {self.rows} SFT rows ({strata}) in {self.out}; {times}"


BM25_PACKAGES = ("bm25s", "PyStemmer", "numpy", "executor-sft")
"""What can change a BM25 index built from the same corpus."""


def bm25_index(corpus: Path, index_dir: Path | None = None) -> tuple[Any, Path]:
    """(retriever, index directory): BM25 over `corpus`, built once per corpus content, tokenizer
    settings and library versions in the cache."""
    from executor_sft.retrieval import build_index, load_retriever
    from executor_sft.retrieval.manifest import BM25Info

    fingerprint = hashlib.sha256(corpus.read_bytes()).hexdigest()
    key = cache_key(fingerprint, BM25Info().model_dump(), packages=BM25_PACKAGES)
    index_dir = index_dir or cache_dir() / "sample_data" / f"bm25-{key}"
    cached_entry(
        index_dir,
        index_dir / "manifest.json",
        lambda: build_index(corpus=corpus, output=index_dir, bm25=True),
    )
    return load_retriever(index_dir, "bm25"), index_dir


def pipeline_config(cfg: SampleConfig, executor_roles: list[str]):
    from executor_sft.agents import PipelineConfig

    return PipelineConfig(
        max_rounds=cfg.max_rounds,
        max_turns=cfg.max_turns,
        top_k=cfg.top_k,
        executor_roles=executor_roles,
        driver="teacher",
    )


def collect_into(
    rollouts: Path,
    questions_path: Path,
    questions: list,
    models: Mapping[str, Any],
    retriever,
    index_dir: Path,
    pipeline,
    *,
    show_progress: bool = True,
    accept_system_change: bool = False,
) -> int:
    """Append episodes for `questions` to `rollouts` (one at a time, so the file order is fixed).

    `accept_system_change`: the file may already hold episodes of another pipeline (the demo
    collects its first questions with a student role and the rest without).
    """
    from executor_sft.retrieval import RetrieverConfig
    from executor_sft.rollout import CollectConfig, CollectQuestionSource, collect

    config = CollectConfig(
        questions=CollectQuestionSource(path=str(questions_path)),
        retriever=RetrieverConfig(index=str(index_dir), k=pipeline.top_k),
        pipeline=pipeline,
        output_dir=str(rollouts.parent),
        concurrency=1,
        accept_system_change=accept_system_change,
    )
    if config.rollouts_path != rollouts:
        raise ValueError(f"rollouts must be named {ROLLOUTS}, got {rollouts}")
    result = run_async(
        collect(config, models=models, retriever=retriever, questions=questions, show_progress=show_progress)
    )
    if result.failed:
        raise RuntimeError(f"{len(result.failed)} episodes failed, first: {result.failed[0]}")
    return result.written


def drop_timings(rollouts: Path) -> None:
    """Rewrite `rollouts` without what the clock measured: the searches' timings and retriever ids
    and the research time are dropped, every model call's `latency_s` and `t_start` set to 0."""
    from executor_sft.schema import Episode

    lines = []
    with rollouts.open(encoding="utf-8") as f:
        for line in f:
            episode = Episode.model_validate(_zero_clock(json.loads(line)))
            episode.research_s = None
            for run in episode.runs:
                for search in run.searches:
                    search.latency_s = search.retriever = None
            lines.append(episode.model_dump_json(by_alias=True) + "\n")
    tmp = rollouts.with_suffix(".tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    tmp.replace(rollouts)


def _zero_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: 0.0 if k in ("latency_s", "t_start") and v is not None else _zero_clock(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_zero_clock(v) for v in value]
    return value


def filter_rollouts(rollouts: Path, sft: Path, report: Path) -> dict[str, Any]:
    """The project's filter with its default rules; writes rows and the composition report."""
    from executor_sft.filters import (
        FilterConfig,
        filter_episodes,
        iter_episodes_by_id,
        write_json,
        write_jsonl,
    )

    result = filter_episodes(iter_episodes_by_id(rollouts), FilterConfig())
    if not result.rows:
        raise RuntimeError(f"the filter kept no rows from {rollouts}: {result.report['exclusions']}")
    write_jsonl(sft, result.rows)
    write_json(report, result.report)
    return result.report


def provenance(config: Any, index_dir: Path) -> dict[str, Any]:
    """What a result was made with: its config (a dataclass or pydantic model), library versions
    and the index it searched."""
    from executor_sft.retrieval import Manifest

    manifest = Manifest.load(index_dir)
    return {
        "config": config.model_dump() if hasattr(config, "model_dump") else asdict(config),
        "versions": library_versions(),
        "index": {"corpus_fingerprint": manifest.corpus.fingerprint, "num_docs": manifest.corpus.num_docs},
    }


def write_provenance(path: Path, config: Any, index_dir: Path) -> None:
    path.write_text(json.dumps(provenance(config, index_dir), indent=2) + "\n", encoding="utf-8")


def make_sample_data(
    out: str | Path,
    config: SampleConfig | None = None,
    *,
    index_dir: Path | None = None,
    show_progress: bool = True,
) -> SampleResult:
    """World -> index -> scripted collection -> filter, into `out` (replacing what was there)."""
    from executor_sft.data import load_questions
    from executor_sft.synthetic import scripted_models, write_world

    cfg = config or SampleConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    t = time.perf_counter()
    world_dir = out / WORLD_DIR
    if world_dir.exists():
        shutil.rmtree(world_dir)
    world = write_world(world_dir, cfg.seed, cfg.entities, cfg.questions)
    times["world"] = time.perf_counter() - t

    t = time.perf_counter()
    retriever, index_dir = bm25_index(world_dir / "corpus.jsonl", index_dir)
    times["index"] = time.perf_counter() - t

    t = time.perf_counter()
    rollouts = out / ROLLOUTS
    rollouts.unlink(missing_ok=True)  # collect() resumes; a regeneration starts afresh
    for sibling in (".summary.json", ".judge_cache.jsonl"):
        rollouts.with_name(rollouts.stem + sibling).unlink(missing_ok=True)
    questions_path = world_dir / "questions_train.jsonl"
    questions = load_questions(questions_path)[: cfg.collect_questions]
    models = scripted_models(world, seed=cfg.seed, teacher_extra_search_rate=cfg.teacher_extra_search_rate)
    pipeline = pipeline_config(cfg, ["teacher", "student"])
    episodes = collect_into(
        rollouts,
        questions_path,
        questions,
        models,
        retriever,
        index_dir,
        pipeline,
        show_progress=show_progress,
    )
    drop_timings(rollouts)
    times["collect"] = time.perf_counter() - t
    # The scripted judge's verdicts and the store's system record: resume aids of collection,
    # not part of the sample.
    for sibling in (".judge_cache.jsonl", ".system.json"):
        rollouts.with_name(rollouts.stem + sibling).unlink(missing_ok=True)

    t = time.perf_counter()
    sft, report_path = out / SFT, out / SFT_REPORT
    report = filter_rollouts(rollouts, sft, report_path)
    times["filter"] = time.perf_counter() - t
    write_provenance(out / PROVENANCE, cfg, index_dir)
    return SampleResult(
        out=out,
        world=world_dir,
        rollouts=rollouts,
        sft=sft,
        report=report_path,
        episodes=episodes,
        rows=report["totals"]["rows"],
        strata={k: v["records"] for k, v in report["strata"].items()},
        seconds=times,
    )

"""Generate the project's sample data (data/) with the project's own pipeline, deterministically.

    python recipes/make_sample_data.py                  # writes data/ (the committed sample)
    python recipes/make_sample_data.py --out /tmp/x     # same bytes elsewhere

Steps: a small fictional world (`executor_sft.synthetic.write_world`) -> a BM25 index of its
corpus (in the cache, not in data/) -> `executor_sft.rollout.collect` over the train questions
with scripted roles (teacher, student, backbone, answerer, judge) and counterfactual re-runs ->
`data/rollouts.jsonl` -> `executor_sft.filters.filter_episodes` -> `data/sft.jsonl` and its
composition report `data/sft.report.json` (the name the SFT recipe looks for beside the data).
`data/sft.jsonl` is the embedded default of `accelerate launch recipes/sft_executor.py`.

The student here is the *scripted* student (one search, no reformulation), so the sample
runs in seconds without any model; `recipes/demo.py` collects with a real SmolLM2 student.
Same arguments, same bytes: `sft.jsonl`, the report and the world files are byte-identical
across runs; `rollouts.jsonl` differs only in measured latencies (`latency_s`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "data"
WORLD_DIR = "world"
ROLLOUTS = "rollouts.jsonl"
SFT = "sft.jsonl"
SFT_REPORT = "sft.report.json"


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


def _fingerprint(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def bm25_index(corpus: Path, index_dir: Path | None = None) -> tuple[Any, Path]:
    """(retriever, index directory): BM25 over `corpus`, built once per corpus content in the cache."""
    from executor_sft.retrieval import build_index, load_retriever
    from executor_sft.testing import cache_dir

    index_dir = index_dir or cache_dir() / "sample_data" / f"bm25-{_fingerprint(corpus)}"
    if not (index_dir / "manifest.json").exists():
        build_index(corpus=corpus, output=index_dir, bm25=True)
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
) -> int:
    """Append episodes for `questions` to `rollouts` (one at a time, so the file order is fixed)."""
    from executor_sft.retrieval import RetrieverConfig
    from executor_sft.rollout import CollectConfig, QuestionSource, collect

    config = CollectConfig(
        questions=QuestionSource(path=str(questions_path)),
        retriever=RetrieverConfig(index=str(index_dir), k=pipeline.top_k),
        pipeline=pipeline,
        output_dir=str(rollouts.parent),
        concurrency=1,
    )
    if config.rollouts_path != rollouts:
        raise ValueError(f"rollouts must be named {ROLLOUTS}, got {rollouts}")
    result = asyncio.run(
        collect(config, models=models, retriever=retriever, questions=questions, show_progress=show_progress)
    )
    if result.failed:
        raise RuntimeError(f"{len(result.failed)} episodes failed, first: {result.failed[0]}")
    return result.written


def filter_rollouts(rollouts: Path, sft: Path, report: Path) -> dict[str, Any]:
    """The project's filter with its default rules; writes rows and the composition report."""
    from executor_sft.filters import FilterConfig, filter_episodes, iter_jsonl, write_json, write_jsonl

    result = filter_episodes(iter_jsonl(rollouts), FilterConfig())
    if not result.rows:
        raise RuntimeError(f"the filter kept no rows from {rollouts}: {result.report['exclusions']}")
    write_jsonl(sft, result.rows)
    write_json(report, result.report)
    return result.report


def make_sample_data(
    out: str | Path = DEFAULT_OUT,
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
    rollouts.with_name(rollouts.stem + ".summary.json").unlink(missing_ok=True)
    questions_path = world_dir / "questions_train.jsonl"
    questions = load_questions(questions_path)[: cfg.collect_questions]
    models = scripted_models(world, seed=cfg.seed)
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
    times["collect"] = time.perf_counter() - t

    t = time.perf_counter()
    sft, report_path = out / SFT, out / SFT_REPORT
    report = filter_rollouts(rollouts, sft, report_path)
    times["filter"] = time.perf_counter() - t
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


def parse_args(argv: list[str] | None = None) -> tuple[Path, SampleConfig]:
    defaults = SampleConfig()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: data/)")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--entities", type=int, default=defaults.entities)
    p.add_argument("--questions", type=int, default=defaults.questions)
    p.add_argument("--collect-questions", type=int, default=defaults.collect_questions)
    p.add_argument("--max-rounds", type=int, default=defaults.max_rounds)
    a = p.parse_args(argv)
    return a.out, SampleConfig(
        seed=a.seed,
        entities=a.entities,
        questions=a.questions,
        collect_questions=a.collect_questions,
        max_rounds=a.max_rounds,
    )


def main(argv: list[str] | None = None) -> int:
    out, cfg = parse_args(argv)
    result = make_sample_data(out, cfg)
    print(json.dumps({"config": asdict(cfg), "strata": result.strata}, indent=None))
    print(result.summary(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

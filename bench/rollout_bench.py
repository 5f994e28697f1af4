"""Collection engine throughput: fixed-latency model doubles + real BM25 over minibench.

    python bench/rollout_bench.py                      # concurrency 1, 16, 64, 256; 1 process and 2 Ray actors
    python bench/rollout_bench.py --concurrency 256 --processes 1 --latency-ms 200 --profile prof.out
    python bench/rollout_bench.py --concurrency 256 1024 --processes 2

`--processes 2` runs the same collection on Ray (`engine: ray`) with as many actors as
`--processes`, on a local one-machine Ray cluster started for the run (one CPU per actor): each
actor loads its own index and models, runs its share of the concurrency and streams episodes
to this process, which writes the one `rollouts.jsonl`. Its wall time is the window from when
every actor is ready to when the last task ends (writes included: there is no merge).

What it isolates: the engine's own overhead (event loop, records, JSON, fsync, retrieval
threads). Every model call is an `asyncio.sleep(latency)` with a FIXED script shape, so the
best possible rate is known exactly:

    backbone: round 0 dispatches 2 sub-queries, round 1 stops
    teacher:  search, search, report          (3 calls; correct, so it gets a counterfactual)
    student:  search, report                  (2 calls; a different report, so a shadow outcome)
    answerer: the gold answer                 (1 call per answer it gives)
    teacher_budget1 (counterfactual re-run): search, report, then its own answerer call

The longest chain of dependent calls in one episode is
    backbone r0 (1) -> teacher, the slower executor (3) -> backbone r1 stop (1) -> answerer (1)
    -> shadow outcome answerer calls, in parallel (1) -> counterfactual re-run (2) -> its answerer (1)
  = 10 calls (+3 with --judge: after the episode answer, the shadow outcome and the counterfactual),
so the ideal rate is concurrency / (10 * latency) episodes/s. Retrieval is real (bm25s over
the 19,982 minibench passages, behind the usual cache), counted as zero in the ideal.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from executor_sft.agents.tools import SEARCH_TOOL_NAME
from executor_sft.data import load_questions
from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.schema import Message, Question, TokenUsage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support

PROMPT_TOKENS, COMPLETION_TOKENS = 100, 10
"""Fixed usage per call, so token totals are known by hand (tests rely on it)."""

_QUESTION = re.compile(r"^Question:\s*(.+)$", re.M)


class FixedShapeModel:
    """A `ChatModel` double: awaits `latency_s`, then replies by a fixed script shape."""

    def __init__(self, name: str, latency_s: float = 0.0):
        self.name = name
        self.latency_s = latency_s
        self.calls = 0

    def reply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> Message:
        raise NotImplementedError

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        self.calls += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        usage = TokenUsage(prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS)
        return ChatResult(
            message=self.reply(messages, tools), usage=usage, latency_s=self.latency_s, model=self.name
        )


def _first_user(messages: list[Message]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


class TwoSubQueryBackbone(FixedShapeModel):
    """Round 0: the question and a variant as two sub-queries; round 1: stop."""

    def reply(self, messages, tools):
        if any(m.get("role") == "assistant" for m in messages):
            return {"role": "assistant", "content": "<stop/>"}
        match = _QUESTION.search(_first_user(messages))
        question = (match.group(1) if match else _first_user(messages)).strip()
        subs = [question, f"{question.rstrip('?')} background?"]
        return {"role": "assistant", "content": "\n".join(f"<subquery>{q}</subquery>" for q in subs)}


class SearchThenReport(FixedShapeModel):
    """Searches `searches` times (the sub-query, then variants) within the budget its instructions
    state ("search at most N time(s)"), then reports.

    The report names how many searches it read, so reports of different budgets differ (and
    each gets its own answerer call, as a real model's different wording would).
    """

    def __init__(self, name: str, latency_s: float = 0.0, searches: int = 1, label: str | None = None):
        super().__init__(name, latency_s)
        self.searches = searches
        self.label = label or name

    def reply(self, messages, tools):
        done = sum(1 for m in messages if m.get("role") == "tool")
        sub_query = _first_user(messages)
        system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        budget = re.search(r"search at most (\d+) time", system)
        allowed = min(self.searches, int(budget.group(1))) if budget else self.searches
        if tools and done < allowed:
            query = sub_query if done == 0 else f"{sub_query} {done}"
            call = {
                "id": f"call_{done}",
                "type": "function",
                "function": {"name": SEARCH_TOOL_NAME, "arguments": json.dumps({"query": query})},
            }
            return {"role": "assistant", "content": "", "tool_calls": [call]}
        answer = f"{self.label} finding after {done} searches"
        return {
            "role": "assistant",
            "content": f"<answer>{answer}</answer>\n<evidence>read {done} results</evidence>",
        }


class GoldAnswerer(FixedShapeModel):
    """Answers every question with its first gold answer (so every run's outcome is correct)."""

    def __init__(self, name: str, questions: list[Question], latency_s: float = 0.0):
        super().__init__(name, latency_s)
        self.gold = {q.question.strip(): q.golden_answers[0] for q in questions}

    def reply(self, messages, tools):
        match = _QUESTION.search(_first_user(messages))
        answer = self.gold.get(match.group(1).strip(), "unknown") if match else "unknown"
        return {"role": "assistant", "content": f"<answer>{answer}</answer>"}


class YesJudge(FixedShapeModel):
    def reply(self, messages, tools):
        return {"role": "assistant", "content": "yes"}


def fixed_shape_models(
    questions: list[Question] | None = None, latency_s: float = 0.2, judge: bool = False
) -> dict[str, Any]:
    models: dict[str, Any] = {
        "backbone": TwoSubQueryBackbone("backbone", latency_s),
        "teacher": SearchThenReport("teacher", latency_s, searches=2),
        "student": SearchThenReport("student", latency_s, searches=1),
        "answerer": GoldAnswerer("answerer", questions, latency_s),
    }
    if judge:
        models["judge"] = YesJudge("judge", latency_s)
    return models


CHAIN_CALLS = 10
"""Dependent model calls on an episode's longest chain (see the module docstring)."""
JUDGE_CHAIN_CALLS = 3


def ensure_minibench_bm25() -> Path:
    """A BM25 index of ../shared/minibench in the user cache (outside the repo), built once."""
    from executor_sft.cache import cache_dir
    from executor_sft.retrieval import build_index
    from tests.support.paths import minibench_corpus

    out = cache_dir() / "indexes" / "minibench-bm25"
    if not (out / "manifest.json").exists():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        build_index(minibench_corpus(), tmp, bm25=True)
        tmp.rename(out)
    return out


def _config(concurrency: int, index: Path, out: Path):
    from executor_sft.rollout import CollectConfig

    shutil.rmtree(out, ignore_errors=True)
    return CollectConfig.model_validate(
        {
            "questions": {"path": "unused"},
            "retriever": {"index": str(index), "kind": "bm25", "k": 3},
            "concurrency": concurrency,
            "output_dir": str(out),
        }
    )


def _row(
    concurrency,
    processes,
    episodes,
    result,
    cpu_s,
    calls,
    latency_s,
    judge,
    merge_s=None,
    engine=None,
    seconds=None,
):
    if result.failed or result.written != episodes:
        raise RuntimeError(
            f"bench run incomplete: wrote {result.written}/{episodes}, failed {result.failed[:3]}"
        )
    chain_s = latency_s * (CHAIN_CALLS + (JUDGE_CHAIN_CALLS if judge else 0))
    ideal = concurrency / chain_s
    seconds = result.elapsed_s if seconds is None else seconds
    rate = episodes / seconds
    row = {
        "engine": engine or "in_process",
        "concurrency": concurrency,
        "processes": processes,
        "episodes": episodes,
        "seconds": seconds,
        "rate": rate,
        "ideal": ideal,
        "ratio": rate / ideal,
        "calls_per_episode": calls / episodes,
        "cpu_ms": None if cpu_s is None else 1000 * cpu_s / episodes,
        "merge_s": merge_s,
    }
    if merge_s is not None:
        row["rate_with_merge"] = episodes / (result.elapsed_s + merge_s)
    return row


async def run_level(
    concurrency: int,
    episodes: int,
    questions: list[Question],
    index: Path,
    latency_s: float,
    judge: bool,
    workdir: Path,
) -> dict[str, float]:
    """One process, one event loop: the plain `collect()`."""
    from executor_sft.retrieval.config import build_retriever
    from executor_sft.rollout import collect

    config = _config(concurrency, index, workdir / f"c{concurrency}")
    subset = questions[:episodes]
    models = fixed_shape_models(subset, latency_s, judge)
    # A fresh retriever (and so an empty cache) per level; loading the index is a one-time
    # start-up cost, not collection throughput, so it stays outside the timed call.
    retriever = build_retriever(config.retriever)
    cpu = time.process_time()
    result = await collect(config, models=models, retriever=retriever, questions=subset, show_progress=False)
    cpu = time.process_time() - cpu
    calls = sum(m.calls for m in models.values())
    return _row(concurrency, 1, episodes, result, cpu, calls, latency_s, judge)


def run_level_ray(
    concurrency: int,
    actors: int,
    episodes: int,
    questions: list[Question],
    index: Path,
    latency_s: float,
    judge: bool,
    workdir: Path,
) -> dict[str, float]:
    """`engine: ray` with `actors` actors on the local Ray cluster; the driver writes the store."""
    from executor_sft.retrieval.config import build_retriever
    from executor_sft.rollout import collect

    config = _config(concurrency, index, workdir / f"c{concurrency}-ray{actors}")
    config = config.model_copy(
        update={"engine": "ray", "ray": config.ray.model_copy(update={"actors": actors})}
    )
    subset = questions[:episodes]
    result = asyncio.run(
        collect(
            config,
            models=functools.partial(fixed_shape_models, latency_s=latency_s, judge=judge),
            retriever=functools.partial(build_retriever, config.retriever),
            questions=subset,
            show_progress=False,
        )
    )
    calls = sum(r["calls"] for r in result.summary["roles"].values())
    if judge:
        calls += 3 * episodes
    return _row(
        concurrency,
        actors,
        episodes,
        result,
        None,
        calls,
        latency_s,
        judge,
        engine="ray",
        seconds=result.timings["window_s"],
    )


def render(rows: list[dict[str, float]], latency_ms: float, judge: bool) -> str:
    chain = CHAIN_CALLS + (JUDGE_CHAIN_CALLS if judge else 0)
    lines = [
        f"latency {latency_ms:g} ms per model call, chain {chain} calls = {chain * latency_ms / 1000:g} s per episode"
        f"{' (with judge)' if judge else ''}",
        "",
        "| engine | concurrency | processes | episodes | wall s | episodes/s | ideal episodes/s | % of ideal "
        "| model calls/episode | CPU ms/episode | merge s | % of ideal incl. merge |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        merge = "-" if r["merge_s"] is None else f"{r['merge_s']:.2f}"
        with_merge = "-" if r["merge_s"] is None else f"{100 * r['rate_with_merge'] / r['ideal']:.1f}%"
        cpu = "-" if r["cpu_ms"] is None else f"{r['cpu_ms']:.1f}"
        lines.append(
            f"| {r['engine']} | {r['concurrency']} | {r['processes']} | {r['episodes']} | {r['seconds']:.2f} | {r['rate']:.2f} "
            f"| {r['ideal']:.2f} | {100 * r['ratio']:.1f}% | {r['calls_per_episode']:.1f} | {cpu} "
            f"| {merge} | {with_merge} |"
        )
    return "\n".join(lines)


def _say(row: dict[str, Any]) -> None:
    print(
        f"{row['engine']}, concurrency {row['concurrency']}, {row['processes']} process(es): "
        f"{row['rate']:.2f} episodes/s ({100 * row['ratio']:.1f}% of ideal)",
        file=sys.stderr,
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--waves", type=int, default=4, help="episodes per level = waves * concurrency")
    parser.add_argument("--min-episodes", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--judge", action="store_true", help="add a judge double (3 more calls on the chain)")
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[1, 2],
        help="processes per level (1 = plain collect, more = that many Ray actors)",
    )
    parser.add_argument("--profile", help="write a cProfile of the last single-process level to this file")
    args = parser.parse_args(argv)

    from tests.support.paths import minibench_questions

    index = ensure_minibench_bm25()
    questions = load_questions(minibench_questions())
    latency_s = args.latency_ms / 1000
    rows = []
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        for i, c in enumerate(args.concurrency):
            episodes = min(len(questions), max(args.min_episodes, args.waves * c))
            for p in args.processes:
                if p > 1 and c < p:
                    continue
                if p > 1:
                    row = run_level_ray(c, p, episodes, questions, index, latency_s, args.judge, Path(tmp))
                else:
                    coro = run_level(c, episodes, questions, index, latency_s, args.judge, Path(tmp))
                    if args.profile and i == len(args.concurrency) - 1:
                        import cProfile

                        with cProfile.Profile(time.process_time) as prof:
                            row = asyncio.run(coro)
                        prof.dump_stats(args.profile)
                    else:
                        row = asyncio.run(coro)
                rows.append(row)
                _say(row)
    print(render(rows, args.latency_ms, args.judge))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

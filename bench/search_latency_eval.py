"""An evaluation per search configuration on minibench: T_search P50/P95 and research P50 per cell.

    python bench/search_latency_eval.py --out bench/results        # after retrieval_bench.py --stack

Every cell is a normal `run_eval` of the role-factorised pipeline over the same dev questions;
only the retriever differs (the configurations of `retrieval_bench.STACK_CONFIGS`, over the
sub-corpus index `retrieval_bench.py --stack` built). The models are data sources with known
behaviour, so the cells differ by their retrieval alone:

- backbone: the oracle decomposition (`executor_sft.llm.oracle`, mode gold): MuSiQue hops one
  per round, other questions whole;
- executor: searches its sub-query once and reports the top passage's title, with every
  retrieved passage as evidence;
- answerer: an oracle reader: answers the gold answer when a gold alias occurs in the evidence
  it was given (cover-EM's containment test), else "unknown". EM is then "the answer reached
  the answerer", an upper bound of a real reader on the same retrieval.

Writes `search_latency_eval.md` (the sweep table: T_search P50/P95, research P50, CER-C and its
answer-bearing proxy per cell) and `search_latency_pareto.png` (EM vs research P50) into --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import retrieval_bench as rb

from executor_sft.eval import EvalConfig, run_eval
from executor_sft.eval.plots import Point, plot_pareto
from executor_sft.eval.report import sweep_markdown, write_markdown
from executor_sft.llm.oracle import OracleBackbone
from executor_sft.metrics.answer import cover_exact_match
from executor_sft.retrieval import load_retriever
from executor_sft.schema import Question

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support
from tests.support.doubles import ScriptedChatModel, assistant, tool_call  # noqa: E402
from tests.support.paths import minibench_corpus, minibench_questions  # noqa: E402


def _user(messages) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def executor_reply(messages, tools):
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if not results and tools:
        return assistant(tool_calls=[tool_call("search", {"query": _user(messages)})])
    text = results[-1] if results else ""
    title = text.split("(Title: ", 1)[1].split(")", 1)[0] if "(Title: " in text else "unknown"
    return f"<answer>{title}</answer><evidence>{text}</evidence>"


def oracle_reader(gold: dict[str, list[str]]):
    def reply(messages, tools):
        prompt = _user(messages)
        aliases = next((a for q, a in gold.items() if q in prompt), [])
        found = aliases and cover_exact_match(prompt, aliases) == 1.0
        return f"<answer>{aliases[0] if found else 'unknown'}</answer>"

    return reply


def short(label: str) -> str:
    """A cell's plot label: the configuration's name without its parenthesised details."""
    return " + ".join(part.split(" (")[0] for part in label.split(" + "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--runs", default=str(rb.cache_dir() / "bench" / "search_latency_eval"))
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--configs",
        default=None,
        help="labels of STACK_CONFIGS separated by ';' (default: all but the yes/no LLM reranker, ~40 s a call on CPU)",
    )
    args = parser.parse_args(argv)
    bench = rb.BenchArgs(stack=True)
    rows = rb.read_jsonl(minibench_corpus())
    dev = [q for q in rb.read_jsonl(minibench_questions()) if q["split"] == "dev"]
    picked = rb.stack_questions(dev, bench.stack_questions)
    cache = Path(bench.cache)
    name = f"minibench_stack{bench.stack_questions}q{bench.stack_docs}"
    bm25_whole = rb.ensure_index(minibench_corpus(), cache / "minibench_bm25", bench.max_length, dense=False)
    corpus = rb.stack_corpus(rows, picked, bench.stack_docs, bm25_whole, cache / f"{name}.jsonl")
    index = rb.ensure_index(corpus, cache / f"{name}_minilm", bench.max_length)
    questions_file = Path(args.runs) / "questions.jsonl"
    questions_file.parent.mkdir(parents=True, exist_ok=True)
    questions_file.write_text("".join(json.dumps(q) + "\n" for q in picked), encoding="utf-8")
    questions = [Question.model_validate(q) for q in picked]
    gold = {q.question: q.golden_answers for q in questions}
    models = {
        "backbone": OracleBackbone(questions, mode="gold"),
        "executor": ScriptedChatModel(name="scripted-executor", default=executor_reply),
        "answerer": ScriptedChatModel(name="oracle-reader", default=oracle_reader(gold)),
    }
    wanted = (
        args.configs.split(";")
        if args.configs
        else [label for label, (kind, _) in rb.STACK_CONFIGS.items() if kind != "llm_rerank"]
    )
    cells, start = [], time.perf_counter()
    load_before = rb._load_note()
    for label in wanted:
        kind, options = rb.STACK_CONFIGS[label]
        slug = "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-")
        config = EvalConfig.model_validate(
            {
                "name": label,
                "output_dir": str(Path(args.runs) / slug),
                "questions": [{"path": str(questions_file)}],
                "samples": 1,
                "concurrency": args.concurrency,
                "plots": False,
                "models": {
                    "backbone": {"backend": "oracle", "questions": str(questions_file), "mode": "gold"},
                    "executor": {"backend": "openai", "model": "scripted-executor"},
                    "answerer": {"backend": "openai", "model": "oracle-reader"},
                },
                "pipeline": {
                    "executor_roles": ["executor"],
                    "driver": "executor",
                    "max_rounds": 5,
                    "max_turns": 2,
                    "top_k": 5,
                },  # fmt: skip
                "retriever": {
                    "index": str(index),
                    "kind": kind,
                    "k": 5,
                    "options": options,
                    "cache": {"enabled": False},
                },  # fmt: skip
                "metrics": {"bucket_tokens": 2000, "n_buckets": 5},
            }
        )
        retriever = load_retriever(index, kind, **json.loads(json.dumps(options)))
        run = run_eval(config, models=models, retriever=retriever, progress=False)
        print(run.summary(), flush=True)
        cells.append((label, "oracle", "scripted", run.results))
    seconds = time.perf_counter() - start
    out = Path(args.out)
    table = sweep_markdown(cells, metric="em")
    header = (
        "# Search configurations in an evaluation: T_search and research P50 per cell\n\n"
        f"Command: `python bench/search_latency_eval.py --out {args.out}"
        + (f' --configs "{args.configs}"' if args.configs else "")
        + "` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s; machine: {load_before} "
        f"before, {rb._load_note()} after, shared with other jobs).\n\n"
        f"{len(questions)} minibench dev questions ({len(questions) // 3} per dataset) over the "
        "sub-corpus of `retrieval_bench.py --stack`; oracle backbone (gold hops), a scripted executor "
        "(one search, reports the top title with all passages as evidence) and an oracle reader "
        "(answers gold when the evidence contains a gold alias): EM = the answer reached the "
        f"answerer. Episodes ran {args.concurrency} at a time and each search runs in a worker "
        "thread, so a T_search includes waiting for the cores behind other episodes' searches; the "
        "scripted models take no time, so research time is search time plus the pipeline's own "
        "overhead. The yes/no LLM configuration is left out (about 40 s per call on this machine: "
        "`retrieval.md`).\n\n"
    )
    write_markdown(header + table, out / "search_latency_eval.md")
    points = [Point(short(label), r.average.get("subagent_tokens") or 0.0, r.average.get("em") or 0.0,
                    research_s=r.average.get("research_p50")) for label, _, _, r in cells]  # fmt: skip
    plot_pareto(points, out / "search_latency_pareto.png", metric="EM (oracle reader)", x="research_s",
                title="minibench: EM vs research P50 per search configuration")  # fmt: skip
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

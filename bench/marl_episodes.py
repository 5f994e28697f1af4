"""What the sub-agents of bench/marl_credit.py's arms do: one greedy episode per question, as text.

    nice -n 5 python bench/marl_episodes.py <bench/marl_credit.py's flags> --show none shared

A reward can rise without the skill it stands for. For each arm in `--show` (its saved model under
`--work/out/<arm>`, `none`: the SFT checkpoint) this plays the training pool's questions and the first
held-out text and table question greedily, and writes each sub-agent's queries, the gold passages its
searches returned, its report, and the answer the episode ends with, to `--results`_episodes.md.
Trains nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.marl_credit import ARMS, _load, gold_returned, parser, play, train_questions  # noqa: E402


def first_of_each_format(questions: list) -> list:
    """The first text and the first table question, in that order (those there are)."""
    first: dict[str, Any] = {}
    for q in questions:
        first.setdefault(q.answer_format, q)
    return [first[fmt] for fmt in ("text", "table") if fmt in first]


def transcript(arm: str, episode) -> list[str]:
    """One episode: the question, each sub-agent's queries and report, the final answer."""
    from executor_sft.grpo.marl import POLICY

    lines = [
        f"### {arm}: {episode.question.id} (F1 {episode.metrics.f1:.2f})",
        "",
        f"Question: {episode.question.question}",
        "",
    ]
    for run in episode.runs_for(POLICY):
        report = run.report.answer if run.report else f"(no report: {run.finish})"
        lines.append(f"- sub-query: {run.sub_query}")
        for search in run.searches:
            found = gold_returned(episode, search)
            lines.append(f"  - search `{search.query[:120]}`: gold passages {found or 'none'}")
        if not run.searches:
            lines.append("  - no search ran")
        lines.append(f"  - report: `{report[:160]}`")
    answer, gold_answer = (
        (a or "").replace("\n", " ") for a in (episode.answer, episode.question.golden_answers[0])
    )
    return [*lines, "", f"Answer: `{answer[:300]}`; gold: `{gold_answer[:300]}`", ""]


def main(argv: list[str] | None = None) -> int:
    from executor_sft.files import atomic_open

    p = parser(__doc__)
    p.add_argument("--show", nargs="+", default=["none", "shared"], choices=ARMS)
    args = p.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    world, retriever, train_q, held_q, _ = train_questions(Path(args.work), args)
    held = first_of_each_format(held_q)
    questions = [*train_q, *held]
    out = [
        "# What the sub-agents do: one greedy episode per question",
        "",
        f"Command: `python bench/marl_episodes.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        "",
        f"Training pool: {', '.join(q.id for q in train_q)}; held out: {', '.join(q.id for q in held)}.",
        "",
    ]
    for arm in args.show:
        model, tok = _load(args.sft if arm == "none" else str(Path(args.work) / "out" / arm))
        for episode in play(model, tok, world, retriever, questions, 0.0, arm, args):
            out += transcript(arm, episode)
    path = Path(args.results + "_episodes.md")
    with atomic_open(path) as fh:
        fh.write("\n".join(out))
    print(f"[marl_episodes] wrote {path}")
    return 0


if __name__ == "__main__":
    from executor_sft.recipe_main import run_recipe

    run_recipe(main)  # a user's mistake is one `error:` line, exit 2; a bug keeps its traceback

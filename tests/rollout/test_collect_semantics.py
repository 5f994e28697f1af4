"""Collection semantics: counterfactual re-runs, summary numbers, resume, shards and merge."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from script_modules import load_script

from executor_sft.agents.answerer import render_findings
from executor_sft.filters.predicates import is_correct
from executor_sft.metrics.answer import exact_match
from executor_sft.rollout import CollectConfig, collect, merge_rollouts, render_summary, select_questions
from executor_sft.schema import Report
from executor_sft.store import read_episodes
from executor_sft.synthetic import (
    ScriptedAnswerer,
    ScriptedBackbone,
    ScriptedJudge,
    ScriptedTeacherExecutor,
    scripted_models,
    scripted_student_executor,
)

REPO = Path(__file__).resolve().parents[2]


def make_config(world_dir, out, **kwargs) -> CollectConfig:
    data = {
        "questions": {"path": str(world_dir / "questions.jsonl")},
        "retriever": {"index": "unused-a-retriever-is-passed"},
        "output_dir": str(out),
        "concurrency": 8,
    }
    data.update(kwargs)
    return CollectConfig.model_validate(data)


def run(coro):
    return asyncio.run(coro)


def by_id(path) -> dict[str, dict]:
    return {e["episode_id"]: e for e in read_episodes(path)}


def test_counterfactual_runs_exactly_for_correct_multi_search_teacher_runs(
    world, world_dir, world_bm25, world_questions, tmp_path
):
    # noise makes some teacher reports wrong (incorrect outcomes), extra searches make some
    # multi-search runs whose first search already had the answer: every case occurs.
    answerer = ScriptedAnswerer(world)
    models = {
        "backbone": ScriptedBackbone(world),
        "answerer": answerer,
        "judge": ScriptedJudge(),
        "teacher": ScriptedTeacherExecutor(world, noise=0.2, extra_search_rate=0.3, seed=3),
        "student": scripted_student_executor(world, seed=4),
    }
    config = make_config(
        world_dir, tmp_path, questions={"path": str(world_dir / "questions.jsonl"), "limit": 40}
    )
    result = run(collect(config, models=models, retriever=world_bm25, show_progress=False))
    assert result.written == 40 and not result.failed

    cases = Counter()
    for episode in read_episodes(result.path):
        runs = episode["runs"]
        cf = [r for r in runs if r["role"] == "teacher_budget1"]
        for run_ in (r for r in runs if r["role"] == "teacher"):
            mine = [r for r in cf if r["counterfactual_of"] == run_["run_id"]]
            # a judge is configured, so "correct" needs judge == True (counterfactual.require_judge: null)
            eligible = run_["n_searches"] >= 2 and is_correct(run_, require_judge=True)
            cases[
                "multi_correct" if eligible else "multi_wrong" if run_["n_searches"] >= 2 else "single"
            ] += 1
            if not eligible:
                assert mine == [], run_["run_id"]
                continue
            assert len(mine) == 1, run_["run_id"]
            (re_run,) = mine
            assert re_run["max_searches"] == 1 and re_run["n_searches"] <= 1
            assert (re_run["round"], re_run["sub_query_index"], re_run["sub_query"]) == (
                run_["round"],
                run_["sub_query_index"],
                run_["sub_query"],
            )
            assert re_run["run_id"] != run_["run_id"]
            # its own outcome, by substituting its report for the teacher's
            outcome = re_run["outcome"]
            assert outcome is not None
            if re_run["report"] == run_["report"]:
                assert outcome["answer"] == episode["answer"]
            else:
                cases["cf_changed_report"] += 1
                assert outcome["substituted"] is True
                # the answerer saw the driver's findings with ONLY this slot replaced
                teacher = {
                    (r["round"], r["sub_query_index"]): r["report"] for r in runs if r["role"] == "teacher"
                }
                teacher[(re_run["round"], re_run["sub_query_index"])] = re_run["report"]
                reports = {k: Report.model_validate(v) if v else None for k, v in teacher.items()}
                pairs = [
                    (q, reports[(rnd["index"], i)])
                    for rnd in episode["rounds"]
                    for i, q in enumerate(rnd["sub_queries"])
                ]
                call = outcome["answerer_call"]
                assert call["messages"][-1]["content"] == render_findings(
                    episode["question"]["question"], pairs
                )
                assert outcome["answer"] == answerer.answer(call["messages"])
                assert outcome["em"] == exact_match(outcome["answer"], episode["question"]["golden_answers"])
                cases["cf_wrong"] += outcome["em"] == 0.0
        assert all(r["counterfactual_of"] is not None for r in cf)
        assert len(cf) == len({r["counterfactual_of"] for r in cf})
    # the sample must contain every case, or the checks above prove nothing
    assert cases["multi_correct"] and cases["multi_wrong"] and cases["single"] and cases["cf_wrong"], cases
    assert result.summary["counterfactual_runs"] == cases["multi_correct"]


def test_counterfactuals_can_be_disabled(world, world_dir, world_bm25, tmp_path):
    config = make_config(
        world_dir,
        tmp_path,
        questions={"path": str(world_dir / "questions.jsonl"), "limit": 12},
        counterfactual={"enabled": False},
    )
    result = run(collect(config, models=scripted_models(world), retriever=world_bm25, show_progress=False))
    roles = {r["role"] for e in read_episodes(result.path) for r in e["runs"]}
    assert roles == {"teacher", "student"}


def test_summary_numbers_by_hand(shapes, world_dir, world_bm25, world_questions, tmp_path):
    """Fixed-shape doubles: every count below follows from the script, not from the engine."""
    questions = world_questions[:3]
    config = make_config(world_dir, tmp_path)
    models = shapes.fixed_shape_models(questions, latency_s=0.0)
    result = run(
        collect(config, models=models, retriever=world_bm25, questions=questions, show_progress=False)
    )
    s = result.summary
    n = 3
    per_call = shapes.PROMPT_TOKENS + shapes.COMPLETION_TOKENS
    # per episode: 2 sub-queries; teacher search-search-report (3 calls, 2 searches) on each;
    # student search-report (2 calls); a budget-1 re-run of each teacher run (2 calls);
    # answerer once for the episode + once per student run + once per re-run.
    expected = {
        "backbone": (2, 0, None),
        "teacher": (2 * 3, 2, ">=2"),
        "student": (2 * 2, 2, "1"),
        "teacher_budget1": (2 * 2, 2, "1"),
        "answerer": (1, 0, None),
        "answerer_outcomes": (2 + 2, 0, None),
    }
    assert set(s["roles"]) == set(expected)
    for role, (calls, runs, bucket) in expected.items():
        r = s["roles"][role]
        assert r["calls"] == n * calls, role
        assert r["prompt_tokens"] == n * calls * shapes.PROMPT_TOKENS, role
        assert r["tokens_per_question"] == calls * per_call, role
        assert r["runs"] == n * runs, role
        if bucket is not None:
            hist = {k: v["runs"] for k, v in r["searches_per_invocation"].items()}
            assert hist == {k: (n * runs if k == bucket else 0) for k in ("0", "1", ">=2")}, role
            assert r["searches_per_invocation"][bucket]["share"] == 1.0
            assert r["finish"] == {"report": n * runs}
    assert s["episodes"] == n and s["questions"] == n and s["counterfactual_runs"] == n * 2
    assert s["stop_reasons"] == {"stopped": n} and s["episode_errors"] == 0
    # the same numbers in the written summary file and the console table
    on_disk = json.loads(result.path.with_name("rollouts.summary.json").read_text())
    assert on_disk["roles"] == s["roles"]
    table = render_summary(s)
    assert "teacher_budget1" in table and f"{2 * per_call * 3}" in table  # teacher tokens/question: 660


def test_resume_skips_finished_and_summary_covers_the_file(world, world_dir, world_bm25, tmp_path):
    config = make_config(
        world_dir,
        tmp_path,
        questions={"path": str(world_dir / "questions.jsonl"), "limit": 10},
        samples_per_question=2,
    )
    first = run(collect(config, models=scripted_models(world), retriever=world_bm25, show_progress=False))
    assert (first.written, first.skipped) == (20, 0)
    before = config.rollouts_path.read_bytes()
    more = config.model_copy(update={"questions": config.questions.model_copy(update={"limit": 12})})
    second = run(collect(more, models=scripted_models(world), retriever=world_bm25, show_progress=False))
    assert (second.written, second.skipped) == (4, 20)
    assert config.rollouts_path.read_bytes().startswith(before)  # finished work is never rewritten
    ids = [e["episode_id"] for e in read_episodes(config.rollouts_path)]
    assert len(ids) == len(set(ids)) == 24
    assert second.summary["episodes"] == 24 and second.summary["questions"] == 12
    third = run(collect(more, models=scripted_models(world), retriever=world_bm25, show_progress=False))
    assert (third.written, third.skipped) == (0, 24) and third.summary["roles"] == second.summary["roles"]


def test_two_shards_cover_every_question_once_and_merge(world, world_dir, world_bm25, tmp_path):
    source = {"path": str(world_dir / "questions.jsonl"), "limit": 15}
    paths = []
    seen: list[set[str]] = []
    for index in range(2):
        config = make_config(
            world_dir, tmp_path / "shards", questions=source, num_shards=2, shard_index=index
        )
        assert config.rollouts_path.name == f"rollouts-0000{index}-of-00002.jsonl"
        result = run(
            collect(config, models=scripted_models(world), retriever=world_bm25, show_progress=False)
        )
        assert not result.failed
        paths.append(result.path)
        seen.append({e["question"]["id"] for e in read_episodes(result.path)})
    all_ids = {q.id for q in select_questions(make_config(world_dir, tmp_path, questions=source))}
    assert len(all_ids) == 15
    assert seen[0] | seen[1] == all_ids and not seen[0] & seen[1]

    merged = tmp_path / "merged" / "rollouts.jsonl"
    assert merge_rollouts(paths, merged) == (15, 0)
    ids = [e["episode_id"] for e in read_episodes(merged)]
    assert len(ids) == len(set(ids)) == 15
    # merging again (or overlapping inputs) adds nothing
    assert merge_rollouts([*paths, paths[0]], merged) == (0, 15 + len(seen[0]))
    assert len(list(read_episodes(merged))) == 15


def test_merge_subcommand(world, world_dir, world_bm25, tmp_path, capsys):
    recipe = load_script("recipes/collect_rollouts.py")
    config = make_config(
        world_dir, tmp_path, questions={"path": str(world_dir / "questions.jsonl"), "limit": 4}
    )
    result = run(collect(config, models=scripted_models(world), retriever=world_bm25, show_progress=False))
    out = tmp_path / "merged.jsonl"
    argv = ["merge", "--inputs", str(result.path), str(result.path), "--output", str(out)]
    assert recipe.main(argv) == 0
    assert "merged 4 episodes" in capsys.readouterr().out  # the second input adds nothing
    assert [e["episode_id"] for e in read_episodes(out)] == [
        e["episode_id"] for e in read_episodes(result.path)
    ]


def test_judge_verdicts_persist_beside_the_rollouts(world, world_dir, world_bm25, tmp_path):
    """A second collection into a fresh output with the same judge cache makes no judge calls."""

    def models(judge):
        return {
            "backbone": ScriptedBackbone(world),
            "answerer": ScriptedAnswerer(world),
            "judge": judge,
            "teacher": ScriptedTeacherExecutor(world),
            "student": scripted_student_executor(world),
        }

    questions = {"path": str(world_dir / "questions.jsonl"), "limit": 6}
    first_judge = ScriptedJudge()
    first = run(
        collect(
            make_config(world_dir, tmp_path, questions=questions),
            models=models(first_judge),
            retriever=world_bm25,
            show_progress=False,
        )
    )
    cache = first.path.with_name("rollouts.judge_cache.jsonl")
    assert cache.exists() and cache.read_text().strip()
    first.path.unlink()  # redo every episode; only the verdict cache survives

    calls = []
    second_judge = ScriptedJudge()
    original = second_judge.chat

    async def counting_chat(*args, **kwargs):
        calls.append(1)
        return await original(*args, **kwargs)

    second_judge.chat = counting_chat
    second = run(
        collect(
            make_config(world_dir, tmp_path, questions=questions),
            models=models(second_judge),
            retriever=world_bm25,
            show_progress=False,
        )
    )
    assert second.written == 6
    assert calls == []


def test_code_given_models_missing_a_role_are_named_before_any_episode(
    world, world_dir, world_bm25, tmp_path
):
    import pytest

    from executor_sft.errors import ConfigError

    models = {k: v for k, v in scripted_models(world).items() if k != "answerer"}
    with pytest.raises(ConfigError, match=r"models: no model for answerer; give one for every role"):
        run(
            collect(
                make_config(world_dir, tmp_path), models=models, retriever=world_bm25, show_progress=False
            )
        )
    rollouts = tmp_path / "rollouts.jsonl"
    assert not rollouts.exists() or not list(read_episodes(rollouts))

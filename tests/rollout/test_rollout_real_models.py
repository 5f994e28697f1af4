"""Collection with a real small model (SmolLM2-135M-Instruct, transformers backend, CPU).

Set-up choice (documented in docs/rollout.md): SmolLM2 plays the STUDENT, a shadow role, while
the synthetic world's scripted backbone, teacher, answerer and judge drive the episode. With
SmolLM2 as the answerer the teacher's outcomes would be decided by a 135M model's phrasing
(it tends to answer "The answer is: 1945", which is not an exact match), so the
info-gain stratum would appear only by chance. A second test runs SmolLM2 as the answerer
and checks that the outcome labels are computed from ITS answers.
"""

from __future__ import annotations

import asyncio

import pytest

from executor_sft.agents.parsing import parse_final_answer
from executor_sft.filters import FilterConfig, filter_episodes
from executor_sft.filters.pipeline import sampled_tokens_of
from executor_sft.filters.predicates import is_correct
from executor_sft.llm import TransformersChatModel
from executor_sft.metrics.answer import exact_match, f1_score
from executor_sft.rollout import CollectConfig, collect
from executor_sft.store import read_episodes
from executor_sft.synthetic import scripted_models

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread: on a shared, busy 2-core host two spinning threads were ~5x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def config_for(world_dir, out, **pipeline) -> CollectConfig:
    return CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl")},
            "retriever": {"index": "unused"},
            "output_dir": str(out),
            "concurrency": 2,
            "pipeline": pipeline,
        }
    )


def info_gain_questions(world, world_dir, world_bm25, world_questions, tmp_path, n: int):
    """Questions where the scripted teacher needs a second search that a budget-1 re-run lacks.

    A cheap all-scripted pass finds them; the real-model run then only spends CPU where the
    info-gain stratum can occur at all.
    """
    config = config_for(world_dir, tmp_path / "scan")
    result = asyncio.run(
        collect(
            config,
            models=scripted_models(world),
            retriever=world_bm25,
            questions=world_questions[:60],
            show_progress=False,
        )
    )
    picked = []
    for episode in read_episodes(result.path):
        runs = episode["runs"]
        cf_failed = {r["counterfactual_of"] for r in runs if r["counterfactual_of"] and not is_correct(r)}
        if any(r["role"] == "teacher" and r["run_id"] in cf_failed for r in runs):
            picked.append(episode["question"]["id"])
    by_id = {q.id: q for q in world_questions}
    return [by_id[i] for i in picked[:n]]


def test_real_student_yields_both_strata(smollm2, world, world_dir, world_bm25, world_questions, tmp_path):
    model, tokenizer = smollm2
    student = TransformersChatModel(model, tokenizer, name="smollm2-135m-instruct")
    questions = info_gain_questions(world, world_dir, world_bm25, world_questions, tmp_path, n=2)
    assert len(questions) == 2
    models = {**scripted_models(world), "student": student}
    config = config_for(
        world_dir,
        tmp_path / "real",
        roles={"student": {"max_turns": 2, "sampling": {"max_tokens": 32}}},
    )
    result = asyncio.run(
        collect(config, models=models, retriever=world_bm25, questions=questions, show_progress=False)
    )
    assert result.written == 2 and not result.failed

    episodes = list(read_episodes(result.path))
    student_runs = [r for e in episodes for r in e["runs"] if r["role"] == "student"]
    assert student_runs and all(r["model"] == "smollm2-135m-instruct" for r in student_runs)
    assert all(r["usage"]["calls"] >= 1 and r["usage"]["prompt_tokens"] > 50 for r in student_runs)
    assert all(r["outcome"] is not None for r in student_runs)  # shadow runs are labelled too
    assert result.summary["roles"]["student"]["runs"] == len(student_runs)

    filtered = filter_episodes(episodes, FilterConfig())
    strata = filtered.report["strata"]
    assert strata["single_search"]["records"] >= 1, filtered.report
    assert strata["info_gain_multi_search"]["records"] >= 1, filtered.report
    assert {row["stratum"] for row in filtered.rows} == {"single_search", "info_gain_multi_search"}
    # The real student's calls kept their sampled ids, one list per assistant turn of its run.
    for r in student_runs:
        per_turn = sampled_tokens_of(r["calls"], r["messages"])
        assert per_turn is not None and len(per_turn) == sum(m["role"] == "assistant" for m in r["messages"])


def test_real_answerer_labels_outcomes(smollm2, world, world_dir, world_bm25, world_questions, tmp_path):
    model, tokenizer = smollm2
    answerer = TransformersChatModel(model, tokenizer, name="smollm2-answerer")
    question = next(q for q in world_questions if q.type == "bridge")
    models = {**scripted_models(world, noise=0.5, seed=1), "answerer": answerer}
    config = config_for(world_dir, tmp_path, roles={"answerer": {"sampling": {"max_tokens": 16}}})
    result = asyncio.run(
        collect(config, models=models, retriever=world_bm25, questions=[question], show_progress=False)
    )
    assert result.written == 1 and not result.failed
    (episode,) = read_episodes(result.path)
    call = episode["answerer"]
    assert call["model"] == "smollm2-answerer" and call["usage"]["completion_tokens"] >= 1
    gold = question.golden_answers
    assert episode["answer"] == parse_final_answer(call["response"]["content"])
    assert episode["metrics"]["em"] == exact_match(episode["answer"], gold)
    assert episode["metrics"]["f1"] == f1_score(episode["answer"], gold)
    for run in episode["runs"]:
        outcome = run["outcome"]
        if outcome and outcome.get("substituted"):  # a different report: SmolLM2 answered again
            assert outcome["answerer_call"]["model"] == "smollm2-answerer"
            assert outcome["answer"] == parse_final_answer(outcome["answerer_call"]["response"]["content"])
            assert outcome["em"] == exact_match(outcome["answer"], gold)

"""End to end with real models and real BM25: schema-valid episodes whatever the models write.

SmolLM2-135M-Instruct and a random tiny Qwen3 (both offline, through the real
TransformersChatModel) play backbone, executors and answerer on minibench questions, with
bm25s over the gold passages plus the first 1,500 minibench passages. A 135M model almost
never writes `<subquery>` tags, so one episode uses a pass-through backbone double (it
dispatches the question itself once) to make sure real executors run inside the pipeline.
"""

from __future__ import annotations

import pytest

from executor_sft.agents import PipelineConfig, RoleConfig, run_episode, run_single_agent
from executor_sft.data.questions import load_questions
from executor_sft.llm import SamplingParams, TransformersChatModel
from executor_sft.retrieval import BM25Retriever, Corpus, iter_corpus
from executor_sft.schema import Episode, LLMCallRecord
from tests import support
from tests.support.doubles import ScriptedChatModel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def questions(minibench_questions_path):
    return load_questions(minibench_questions_path, limit=2)


@pytest.fixture(scope="module")
def bm25(minibench_corpus_path, questions):
    gold = {d for q in questions for d in q.positive_doc_ids or []}
    passages = [p for i, p in enumerate(iter_corpus(minibench_corpus_path)) if i < 1500 or p.id in gold]
    return BM25Retriever.build(Corpus.from_passages(passages))


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = support.tiny_qwen3(seed=3)
    chat = TransformersChatModel(model, tokenizer, name="tiny-qwen3")
    yield chat
    chat.close()


@pytest.fixture(scope="module")
def smol(smollm2):
    model, tokenizer = smollm2
    chat = TransformersChatModel(model, tokenizer, name="smollm2-135m")
    yield chat
    chat.close()


def tokens(n: int, **kw) -> RoleConfig:
    return RoleConfig(sampling=SamplingParams(max_tokens=n), **kw)


def check_episode(ep: Episode) -> None:
    """Invariants that must hold whatever the models wrote."""
    data = ep.to_dict()
    assert Episode.model_validate_json(ep.to_json()).to_dict() == data
    assert len({r.run_id for r in ep.runs}) == len(ep.runs)
    for run in ep.runs:
        assert run.finish in ("report", "turn_budget", "invalid", "error")
        assert (run.report is not None) == (run.finish == "report")
        assert run.messages[0]["role"] == "system" and run.messages[1] == {
            "role": "user",
            "content": run.sub_query,
        }
        calls = [LLMCallRecord.model_validate(c) for c in run.calls]
        ok = [c for c in calls if c.error is None]
        assert sum(m["role"] == "assistant" for m in run.messages) == len(ok) <= run.max_turns
        assert run.n_searches == len(run.searches) <= run.max_searches
        # Usage is the backend's own token counts, summed.
        assert run.usage.calls == len(ok)
        assert run.usage.prompt_tokens == sum(c.usage.prompt_tokens for c in ok) > 0
        assert run.usage.completion_tokens == sum(c.usage.completion_tokens for c in ok)
        if run.protocol == "native":
            assert sum(m["role"] == "tool" for m in run.messages) >= run.n_searches
        assert run.outcome is not None
    for role, usage in ep.usage.items():
        runs = ep.runs_for(role)
        if runs:
            assert usage.calls == sum(r.usage.calls for r in runs)


async def test_real_models_all_roles(questions, bm25, smol, tiny):
    config = PipelineConfig(
        max_rounds=2,
        max_parallel=2,
        max_turns=2,
        roles={"backbone": tokens(32), "teacher": tokens(24), "student": tokens(24), "answerer": tokens(16)},
    )
    models = {"backbone": smol, "teacher": tiny, "student": tiny, "answerer": tiny}
    ep = await run_episode(questions[0], models, bm25, config)
    check_episode(ep)
    assert ep.stop_reason in ("stopped", "round_budget")
    assert ep.usage["backbone"].calls == len(ep.rounds) >= 1
    assert ep.answerer.model == "tiny-qwen3" and ep.answer is not None


async def test_real_executors_in_pipeline(questions, bm25, smol, tiny):
    question = questions[1]
    backbone = ScriptedChatModel(
        [f"<subquery>{question.question}</subquery>", "<stop/>"], name="pass-through"
    )
    config = PipelineConfig(
        max_rounds=2,
        max_turns=2,
        roles={"teacher": tokens(24), "student": tokens(24, protocol="tag"), "answerer": tokens(16)},
    )
    models = {"backbone": backbone, "teacher": smol, "student": tiny, "answerer": tiny}
    ep = await run_episode(question, models, bm25, config)
    check_episode(ep)
    assert {r.role for r in ep.runs} == {"teacher", "student"}
    assert ep.runs_for("student")[0].protocol == "tag"
    assert ep.config["models"]["teacher"] == "smollm2-135m"
    assert ep.stop_reason == "stopped"


async def test_real_single_agent(questions, bm25, tiny):
    ep = await run_single_agent(tiny, bm25, questions[0], max_turns=3, sampling=SamplingParams(max_tokens=24))
    check_episode(ep)
    assert ep.runs[0].role == "single_agent"

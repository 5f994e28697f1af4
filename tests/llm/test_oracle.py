"""The oracle-decomposition backbone through the real backbone session (prompts, parsing, feedback)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from executor_sft.agents.backbone import BackboneSession
from executor_sft.llm.config import ChatModelConfig, build_chat_model
from executor_sft.llm.oracle import OracleBackbone, fill_references
from executor_sft.rollout.config import CollectConfig
from executor_sft.runtime import Runtime
from executor_sft.schema import Question, Report

MUSIQUE = Question(
    id="musique-train-3hop",
    question="Who was in charge of the country where the composer of Aschenbrodel was a citizen?",
    golden_answers=["Karl Renner"],
    dataset="musique",
    decomposition=[
        {"question": "Aschenbrödel >> composer", "answer": "Johann Strauss II"},
        {"question": "#1 >> country of citizenship", "answer": "Austria"},
        {"question": "Who was in charge of #2 ?", "answer": "Karl Renner"},
    ],
)
HOTPOT = Question(id="hotpot-1", question="Which band released Counterparts?", golden_answers=["Rush"])


async def _play(oracle, question: Question, reports: list[Report | None]) -> list[list[str]]:
    """Run a backbone session, feeding `reports` in order; the sub-queries of each round."""
    session = BackboneSession(oracle, question.question, max_rounds=5)
    rounds: list[list[str]] = []
    for i in range(5):
        step = await session.decide()
        if step.decision.stop:
            break
        rounds.append(step.decision.sub_queries)
        report = reports[i] if i < len(reports) else None
        session.add_reports(i, [(q, report) for q in step.decision.sub_queries], rounds_left=4 - i)
    return rounds


async def test_report_mode_fills_hops_from_the_executor_reports():
    oracle = OracleBackbone([MUSIQUE, HOTPOT])
    reports = [Report(answer="Mozart", evidence="e"), Report(answer="Salzburg"), Report(answer="x")]
    rounds = await _play(oracle, MUSIQUE, reports)
    assert rounds == [
        ["Aschenbrödel >> composer"],
        ["Mozart >> country of citizenship"],  # the (wrong) report propagates
        ["Who was in charge of Salzburg ?"],
    ]


async def test_gold_mode_fills_hops_from_the_gold_answers():
    oracle = OracleBackbone([MUSIQUE], mode="gold")
    rounds = await _play(oracle, MUSIQUE, [None, None, None])
    assert rounds == [
        ["Aschenbrödel >> composer"],
        ["Johann Strauss II >> country of citizenship"],
        ["Who was in charge of Austria ?"],
    ]


async def test_a_missing_report_stops_a_chain_that_needs_it():
    rounds = await _play(OracleBackbone([MUSIQUE]), MUSIQUE, [None])
    assert rounds == [["Aschenbrödel >> composer"]]


async def test_questions_without_decomposition_are_dispatched_whole_once():
    oracle = OracleBackbone([MUSIQUE, HOTPOT])
    assert await _play(oracle, HOTPOT, [Report(answer="Rush")]) == [[HOTPOT.question]]
    unknown = Question(id="u", question="What is not in the file?", golden_answers=["x"])
    assert await _play(oracle, unknown, []) == [["What is not in the file?"]]


async def test_usage_is_zero_and_the_name_is_recorded():
    result = await OracleBackbone([HOTPOT], name="oracle-x").chat(
        [{"role": "user", "content": f"Question: {HOTPOT.question}"}]
    )
    assert result.model == "oracle-x" and result.usage.prompt_tokens == result.usage.completion_tokens == 0
    assert result.message["content"] == f"<subquery>{HOTPOT.question}</subquery>"


def test_fill_references():
    assert fill_references("#2 of #1", ["a", "b"]) == "b of a"
    assert fill_references("#3 of #1", ["a", "b"]) is None
    assert fill_references("#1", [None]) is None


def test_config_selects_the_oracle_with_its_own_fields(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(MUSIQUE.to_json() + "\n", encoding="utf-8")
    cfg = ChatModelConfig.model_validate({"backend": "oracle", "questions": str(path), "mode": "gold"})
    oracle = build_chat_model(cfg)
    assert (
        isinstance(oracle, OracleBackbone) and oracle.mode == "gold" and oracle.name == "oracle-decomposition"
    )
    assert "questions" not in ChatModelConfig(model="m").model_dump()
    with pytest.raises(ValidationError, match="questions\n  Field required"):
        ChatModelConfig.model_validate({"backend": "oracle"})
    with pytest.raises(
        ValidationError, match="not a field of backend 'openai'; it belongs to backend 'oracle'"
    ):
        ChatModelConfig.model_validate({"model": "m", "mode": "gold"})


async def test_oracle_configs_that_answer_differently_share_no_cache_entry(tmp_path):
    """A shared `llm_cache_path` must not replay a report-mode answer into a gold-mode run."""
    questions = tmp_path / "q.jsonl"
    questions.write_text(MUSIQUE.to_json() + "\n", encoding="utf-8")
    other = tmp_path / "other.jsonl"
    renamed = [
        {**hop, "answer": "Anton Webern"} if i == 0 else hop for i, hop in enumerate(MUSIQUE.decomposition)
    ]
    other.write_text(MUSIQUE.model_copy(update={"decomposition": renamed}).to_json() + "\n", encoding="utf-8")

    def backbone(**oracle):
        config = CollectConfig.model_validate(
            {
                "questions": {"path": str(questions)},
                "retriever": {"index": "unused"},
                "models": {
                    "backbone": {"backend": "oracle", "questions": str(questions), **oracle},
                    **{role: {"model": role} for role in ("answerer", "teacher", "student")},
                },
                "llm_cache_path": str(tmp_path / "shared.llm_cache.jsonl"),
            }
        )
        return Runtime.build(config.models, None, llm_cache=config.llm_cache_file())

    async def play(runtime):
        with runtime.cached_calls():
            return await _play(runtime.models["backbone"], MUSIQUE, wrong)

    wrong = [Report(answer="Mozart"), Report(answer="Salzburg")]
    reporting = backbone(mode="report")
    report = await play(reporting)
    assert reporting.cache.misses > 0 and await play(reporting) == report  # the cache is consulted
    assert reporting.cache.hits > 0
    gold = await play(backbone(mode="gold"))
    assert report[1] == ["Mozart >> country of citizenship"]
    assert gold[1] == ["Johann Strauss II >> country of citizenship"]
    assert (await play(backbone(mode="gold", questions=str(other))))[1] == [
        "Anton Webern >> country of citizenship"
    ]


def test_minibench_musique_questions_have_decompositions(minibench_questions_path):
    oracle = OracleBackbone.from_file(minibench_questions_path, mode="gold")
    musique = [q for q in oracle._by_text.values() if q.dataset == "musique"]
    assert musique and all(len(q.model_extra["decomposition"]) >= 2 for q in musique)
    first = [{"role": "user", "content": f"Question: {musique[0].question}"}]
    assert oracle.reply(first).startswith("<subquery>")

"""Wide tasks in the synthetic world: tables, the scripted lead's list-then-fan-out, width, the dispatch cap."""

from __future__ import annotations

import asyncio
import json
import statistics

import pytest

from executor_sft.agents import PipelineConfig, run_episode
from executor_sft.data import load_questions
from executor_sft.metrics import parse_markdown_table, table_scores
from executor_sft.retrieval import BM25Retriever, load_corpus
from executor_sft.synthetic import ScriptedBackbone, scripted_models, write_world

SEED, N_ENTITIES, N_QUESTIONS = 7, 300, 120


@pytest.fixture(scope="module")
def wide_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("wide_world")
    world = write_world(out, SEED, N_ENTITIES, N_QUESTIONS, wide_share=0.15)
    return out, world, BM25Retriever.build(load_corpus(out / "corpus.jsonl"))


def _wide(world):
    return [q for q in world.questions if q.type == "wide"]


def test_wide_questions_have_gold_tables_and_load_with_unique_columns(wide_world, world):
    out, wide, _ = wide_world
    tasks = _wide(wide)
    assert len(tasks) >= 5 and {q.type for q in wide.questions} == {"bridge", "comparison", "wide"}
    for q in tasks:
        table = parse_markdown_table(q.golden_answers[0])
        assert table.header == ["City", "Population", "Founded"] and len(table.rows) >= 3
        assert len(q.decomposition) == 1 + 2 * len(table.rows)  # the listing hop, then 2 cells a city
        listing = q.decomposition[0]
        assert listing.question == f"Which cities are in {listing.subject}?"
        assert listing.answer == ", ".join(r[0] for r in table.rows)
        assert all(h.depends_on == 0 for h in q.decomposition[1:])
    loaded = {q.id: q for q in load_questions(out / "questions.jsonl")}
    assert loaded[tasks[0].id].unique_columns == ["City"] and loaded[tasks[0].id].answer_format == "table"
    assert all(q.unique_columns is None for q in loaded.values() if q.id not in {t.id for t in tasks})
    # The default world (the sample data's) has no wide task and no city list in a country's passage.
    assert not _wide(world)
    assert not any("The cities of" in world.passage_text(e) for e in world.entities if e.type == "country")


def _feedback(pairs):
    body = "\n\n".join(
        f"[{i}] Sub-query: {q}\nReport: <answer>{a}</answer>" for i, (q, a) in enumerate(pairs, 1)
    )
    return {"role": "user", "content": f"Reports from round 1:\n\n{body}\n\nDispatch or stop."}


def test_scripted_lead_lists_first_then_fans_out_p_cells_a_round(wide_world):
    _, wide, _ = wide_world
    q = next(q for q in _wide(wide) if len(q.decomposition) >= 7)
    listing, cells = q.decomposition[0], [h.question for h in q.decomposition[1:]]
    lead = ScriptedBackbone(wide)
    msgs = [
        {"role": "system", "content": "Dispatch between 1 and 4 sub-queries that can be researched"},
        {"role": "user", "content": f"Question: {q.question}"},
    ]
    first = lead.reply(msgs)
    assert first == f"<subquery>{listing.question}</subquery>"
    msgs += [{"role": "assistant", "content": first}, _feedback([(listing.question, listing.answer)])]
    second = lead.reply(msgs)
    assert second == "\n".join(f"<subquery>{c}</subquery>" for c in cells[:4])
    msgs += [{"role": "assistant", "content": second}, _feedback([(c, "1") for c in cells[:4]])]
    assert lead.reply(msgs) == "\n".join(f"<subquery>{c}</subquery>" for c in cells[4:8])
    # An empty listing report leaves nothing to fan out.
    unknown = [*msgs[:3], _feedback([(listing.question, "unknown")])]
    assert lead.reply(unknown) == "<stop/>"


def _run(questions, models, bm25, **pipeline):
    cfg = PipelineConfig(executor_roles=["teacher"], driver="teacher", label_outcomes=False, **pipeline)
    return asyncio.run(_gather(questions, models, bm25, cfg))


async def _gather(questions, models, bm25, cfg):
    return await asyncio.gather(*(run_episode(q, models, bm25, cfg) for q in questions))


def test_item_f1_rises_with_width_and_a_covered_table_succeeds(wide_world):
    out, wide, bm25 = wide_world
    questions = [q for q in load_questions(out / "questions.jsonl") if q.unique_columns]
    models = scripted_models(wide)
    by_width = {p: _run(questions, models, bm25, max_rounds=3, max_parallel=p) for p in (1, 4, 10)}
    item = {p: statistics.fmean(e.metrics.item_f1 for e in eps) for p, eps in by_width.items()}
    assert item[1] < item[4] < item[10]
    for e in by_width[10]:
        n_rows = len(parse_markdown_table(e.question.golden_answers[0]).rows)
        # Two fan-out rounds of 10 cover 2 cells a city for up to 10 cities.
        assert (e.metrics.success == 1.0) == (n_rows <= 10), e.question.id
        assert e.metrics.em == e.metrics.success and e.metrics.f1 == e.metrics.item_f1
        assert e.metrics.judge is (e.metrics.success == 1.0)  # judged by cells, no judge model call
        assert e.metrics == table_scores_metrics(e)
        assert max(len(r.sub_queries) for r in e.rounds) <= 10
    record = json.loads(by_width[1][0].to_json())
    assert set(record["metrics"]) == {"em", "f1", "judge", "item_f1", "row_f1", "success"}
    assert "max_concurrent_executors" not in record["config"]


def table_scores_metrics(episode):
    s = table_scores(episode.answer, episode.question.golden_answers[0], episode.question.unique_columns)
    return type(episode.metrics)(
        em=s.success,
        f1=s.item_f1,
        judge=s.success == 1.0,
        item_f1=s.item_f1,
        row_f1=s.row_f1,
        success=s.success,
    )


class _Counting:
    """An executor that records how many of its conversations are in flight at once."""

    def __init__(self, inner):
        self.inner, self.name = inner, "counting"
        self.now = self.peak = 0

    async def chat(self, messages, tools=None, sampling=None):
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(0.005)
            return await self.inner.chat(messages, tools, sampling)
        finally:
            self.now -= 1


@pytest.mark.parametrize(("cap", "peak"), [(None, 10), (3, 3)])
def test_max_concurrent_executors_caps_runs_across_episodes(wide_world, cap, peak):
    out, wide, bm25 = wide_world
    questions = [q for q in load_questions(out / "questions.jsonl") if q.unique_columns][:3]
    models = scripted_models(wide)
    counting = _Counting(models["teacher"])
    episodes = _run(
        questions,
        {**models, "teacher": counting},
        bm25,
        max_rounds=2,
        max_parallel=10,
        max_concurrent_executors=cap,
    )
    assert counting.peak == peak if cap else counting.peak >= peak
    assert all(len(e.runs) == len(e.rounds[1].sub_queries) + 1 for e in episodes)

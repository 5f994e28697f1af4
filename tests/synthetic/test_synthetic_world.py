"""The generated world: deterministic, self-consistent, answerable, and held out where it says so."""

from __future__ import annotations

import json
import re

import pytest

from executor_sft.data import load_questions
from executor_sft.metrics.answer import normalize_answer
from executor_sft.retrieval import load_corpus
from executor_sft.synthetic import (
    RELATIONS,
    generate_world,
    load_world,
    parse_subquery,
    render_subject,
    write_world,
)

FILES = [
    "corpus.jsonl",
    "questions.jsonl",
    "questions_train.jsonl",
    "questions_test.jsonl",
    "subqueries_train.jsonl",
    "subqueries_test.jsonl",
    "world.json",
]


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_same_seed_gives_identical_files_and_another_seed_does_not(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_world(a, 3, 150, 60)
    write_world(b, 3, 150, 60)
    write_world(c, 4, 150, 60)
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "corpus.jsonl").read_bytes() != (c / "corpus.jsonl").read_bytes()
    assert (a / "questions.jsonl").read_bytes() != (c / "questions.jsonl").read_bytes()


def test_corpus_has_one_titled_passage_per_entity_and_every_gold_id_exists(world, world_dir):
    corpus = load_corpus(world_dir / "corpus.jsonl")
    ids = corpus.ids()
    assert len(ids) == len(set(ids)) == len(world.entities)
    titles = {p.id: p.title for p in (corpus[i] for i in range(len(corpus)))}
    for e in world.entities:
        assert titles[e.id] == e.name
    rows = _rows(world_dir / "questions.jsonl")
    assert len(rows) == len(world.questions)
    for row in rows:
        assert row["dataset"] == "synthetic"
        assert row["positive_doc_ids"], row["id"]
        assert set(row["positive_doc_ids"]) <= set(ids)
        assert set(row["positive_doc_ids"]) == {h["gold_doc_id"] for h in row["decomposition"]}


def _contains(passage: str, answer: str) -> bool:
    return f" {normalize_answer(answer)} " in f" {normalize_answer(passage)} "


def test_every_hop_is_answerable_from_its_gold_passage(world):
    texts = {e.id: world.passage_text(e) for e in world.entities}
    for q in world.questions:
        for h in q.decomposition:
            assert _contains(texts[h.gold_doc_id], h.answer), (q.id, h.question, h.answer)
            assert world.by_id[h.gold_doc_id].name == h.subject
        if q.type == "bridge":
            assert q.golden_answers[0] == q.decomposition[-1].answer
        else:  # comparison: the gold answer follows from the two hop answers
            values = [int(re.sub(r"\D", "", h.answer)) for h in q.decomposition]
            pick = min if q.compare["pick"] == "min" else max
            winner = q.compare["candidates"][values.index(pick(values))]
            assert q.golden_answers == [winner]
            assert values[0] != values[1]


def test_decompositions_chain_and_parse_back(world):
    shapes = set()
    for q in world.questions:
        hops = q.decomposition
        shapes.add((q.type, len(hops)))
        assert 2 <= len(hops) <= 4
        for i, h in enumerate(hops):
            rel = RELATIONS[h.relation]
            assert h.question == rel.question.format(s=render_subject(rel.subject, h.subject, h.descriptor))
            parsed = parse_subquery(h.question, world.types_of)
            assert parsed is not None and parsed.relation.key == h.relation, h.question
            assert (parsed.name, parsed.descriptor) == (h.subject, h.descriptor)
            # The descriptor picks exactly the gold entity out of its namesakes.
            assert world.resolve(rel.subject, h.subject, h.descriptor).id == h.gold_doc_id
            assert h.ambiguous == (len(world.named(h.subject, rel.subject)) > 1)
            if q.type == "bridge" and i > 0:
                assert h.depends_on == i - 1
                assert h.subject == hops[i - 1].answer
            else:
                assert h.depends_on is None
    assert {("bridge", 2), ("bridge", 3), ("bridge", 4), ("comparison", 2)} <= shapes
    ambiguous = [h for q in world.questions for h in q.decomposition if h.ambiguous]
    assert ambiguous, "the world must contain ambiguous sub-queries"


def test_namesakes_differ_from_the_gold_entity_on_every_asked_fact(world):
    for q in world.questions:
        for h in q.decomposition:
            if not h.ambiguous:
                continue
            gold = world.by_id[h.gold_doc_id]
            for other in world.named(gold.name, gold.type):
                if other.id != gold.id:
                    assert world.value(other, h.relation) != h.answer
                    assert other.descriptor != gold.descriptor


def test_files_load_through_the_question_loader(world, world_dir):
    questions = load_questions(world_dir / "questions.jsonl")
    assert [q.id for q in questions] == [q.id for q in world.questions]
    first = questions[0]
    assert first.dataset == "synthetic" and first.decomposition and first.type in ("bridge", "comparison")
    assert set(first.decomposition[0]) >= {"question", "answer", "gold_doc_id"}
    train = load_questions(world_dir / "questions_train.jsonl")
    test = load_questions(world_dir / "questions_test.jsonl")
    assert train and test
    assert {q.id for q in train} | {q.id for q in test} == {q.id for q in questions}
    assert not {q.id for q in train} & {q.id for q in test}
    sub_train = load_questions(world_dir / "subqueries_train.jsonl")
    sub_test = load_questions(world_dir / "subqueries_test.jsonl")
    assert sub_train and sub_test
    assert all(len(q.positive_doc_ids) == 1 for q in sub_train + sub_test)


def test_test_split_is_held_out_at_the_sub_query_level(world, world_dir):
    train_hops = {h.question for q in world.split("train") for h in q.decomposition}
    test_hops = {h.question for q in world.split("test") for h in q.decomposition}
    assert not train_hops & test_hops
    sub_test = {r["question"] for r in _rows(world_dir / "subqueries_test.jsonl")}
    sub_train = {r["question"] for r in _rows(world_dir / "subqueries_train.jsonl")}
    assert sub_test and not sub_test & sub_train
    assert 0.1 <= len(world.split("test")) / len(world.questions) <= 0.35


def test_load_world_round_trips_and_names_a_bad_manifest(world, world_dir, tmp_path):
    again = load_world(world_dir)
    assert [e.id for e in again.entities] == [e.id for e in world.entities]
    assert again.meta["stats"] == world.meta["stats"]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "world.json").write_text(json.dumps({"format": "something/else"}))
    with pytest.raises(ValueError, match=r"world\.json.*format"):
        load_world(bad)


def test_invalid_sizes_are_rejected_with_the_field_named():
    with pytest.raises(ValueError, match="ambiguity"):
        generate_world(0, 200, 10, ambiguity=1.5)
    with pytest.raises(ValueError, match="n_entities"):
        generate_world(0, 10, 10)

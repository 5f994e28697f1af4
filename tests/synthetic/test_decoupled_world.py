"""The decoupled world (issue #57): a surface that does not say when a second search is needed.

Real worlds at the ablation's size (600 entities, 400 questions, `DECOUPLED_WORLD`), a real BM25
index over each, the scripted teacher through the real executor loop.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bench.probing.surface import bow_balanced_accuracy, first_searches, shortcut_accuracy
from executor_sft.agents import run_executor
from executor_sft.files import read_jsonl
from executor_sft.metrics.answer import exact_match
from executor_sft.retrieval import BM25Retriever, load_corpus
from executor_sft.synthetic import DECOUPLED_WORLD, ScriptedTeacherExecutor, write_world
from executor_sft.synthetic.relations import PERSON_RELATIONS

SEEDS, N_ENTITIES, N_QUESTIONS, K = (0, 1, 2), 600, 400, 3


def _person_rows(path):
    return [r for r in read_jsonl(path) if r["relation"] in PERSON_RELATIONS]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """seed -> (world, its directory, BM25 over its corpus)."""
    out = {}
    for seed in SEEDS:
        d = tmp_path_factory.mktemp(f"decoupled{seed}")
        world = write_world(d, seed, N_ENTITIES, N_QUESTIONS, **DECOUPLED_WORLD)
        out[seed] = (world, d, BM25Retriever.build(load_corpus(d / "corpus.jsonl")))
    return out


@pytest.fixture(scope="module")
def searches(worlds):
    """seed -> (first searches of the train split's person sub-queries, of the held-out ones)."""
    return {
        seed: tuple(
            first_searches(w, r, _person_rows(d / f"subqueries_{s}.jsonl"), K) for s in ("train", "test")
        )
        for seed, (w, d, r) in worlds.items()
    }


def test_the_world_with_cues_records_none_of_the_decoupled_options(world_dir):
    config = json.loads((world_dir / "world.json").read_text())["config"]
    assert not {"decoupled", "twin_share", "bare_share"} & set(config)


def _shape(world, person) -> list[str]:
    """A person's passage with its name, occupation, place, years, titles and numbers taken out."""
    out = []
    for sentence in world.sentences(person)[:3]:
        words = sentence.replace(person.name, "N").replace(person.descriptor, "OCC").split()
        kept = (
            w for w in words if not w[:1].isupper() and not w[:1].isdigit() and w not in {"and", "a", "an"}
        )
        out.append(" ".join(kept))
    return out


def test_namesakes_read_like_the_person_they_share_a_name_with_but_for_the_occupation(worlds):
    world = worlds[0][0]
    groups = 0
    for p in (e for e in world.entities if e.type == "person" and e.kind == "core"):
        others = [e for e in world.named(p.name, "person") if e.id != p.id]
        if not others:
            continue
        groups += 1
        for o in others:
            assert o.descriptor != p.descriptor
            assert o.descriptor in {"film director", "novelist", "singer", "entrepreneur"}
            assert _shape(world, o) == _shape(world, p)
            assert "is known for" not in world.passage_text(o)
    assert groups >= 10


def test_most_plain_person_sub_queries_name_a_descriptor(worlds):
    rows = [
        r
        for _, d, _ in worlds.values()
        for s in ("train", "test")
        for r in _person_rows(d / f"subqueries_{s}.jsonl")
        if r["type"] == "single_hop"
    ]
    share = sum(bool(r["descriptor"]) for r in rows) / len(rows)
    assert 0.7 <= share <= 0.9, share


def test_some_plain_first_searches_miss_with_another_core_template_person_first(worlds, searches):
    for seed, (world, d, _) in worlds.items():
        rows = _person_rows(d / "subqueries_train.jsonl")
        plain = [(r, f) for r, f in zip(rows, searches[seed][0], strict=True) if r["type"] == "single_hop"]
        missed = [(r, f) for r, f in plain if f.needed]
        assert 0.15 <= len(missed) / len(plain) <= 0.6, (seed, len(missed), len(plain))
        for r, f in missed:
            assert "is credited with" in f.doc1
            assert not f.doc1.startswith(world.by_id[r["subject_id"]].name + " ")


def test_held_out_people_and_their_namesake_groups_never_appear_in_training(worlds):
    for world, d, _ in worlds.values():
        train = {
            h.subject.lower()
            for q in world.split("train")
            for h in q.decomposition
            if h.relation in PERSON_RELATIONS
        }
        test_rows = _person_rows(d / "subqueries_test.jsonl")
        assert len(test_rows) >= 40
        for r in test_rows:
            assert world.by_id[r["subject_id"]].name.lower() not in train


def test_neither_the_sub_query_nor_doc_1_predicts_a_needed_second_search(searches):
    pooled = ([], [])
    for seed, (train, test) in searches.items():
        acc = shortcut_accuracy(train, test)
        assert acc["sub_query"] <= 0.6 and acc["doc1"] <= 0.6, (seed, acc)
        assert 0.2 <= acc["needed_test"] / acc["n_test"] <= 0.6
        pooled[0].extend(train)
        pooled[1].extend(test)
    acc = shortcut_accuracy(*pooled)
    assert acc["sub_query"] <= 0.6 and acc["doc1"] <= 0.6, acc


def test_the_one_structural_cue_is_scored_and_the_probes_stay_near_chance_without_it(searches):
    """A sub-query naming no descriptor never needs a second search (none of its namesakes' passages
    could be told apart), so "search again iff a descriptor is named" beats chance; how far is
    the share of such sub-queries, which DECOUPLED_WORLD's bare_share sets."""
    for seed, (train, test) in searches.items():
        assert not any(f.needed for f in train + test if not f.named)
        assert any(not f.named for f in test)
        acc = shortcut_accuracy(train, test)
        assert 0.55 <= acc["descriptor_rule"] <= 0.65, (seed, acc)
        assert acc["named_sub_query"] <= 0.6 and acc["named_doc1"] <= 0.6, (seed, acc)
        assert acc["n_named_test"] == sum(f.named for f in test) < acc["n_test"]


def test_the_probe_finds_the_template_cue_of_the_world_with_cues(tmp_path):
    world = write_world(tmp_path, 0, N_ENTITIES, N_QUESTIONS)
    retriever = BM25Retriever.build(load_corpus(tmp_path / "corpus.jsonl"))
    train, test = (
        first_searches(world, retriever, _person_rows(tmp_path / f"subqueries_{s}.jsonl"), K)
        for s in ("train", "test")
    )
    assert shortcut_accuracy(train, test)["doc1"] >= 0.9


def test_the_probe_finds_a_planted_word():
    train = [f"alpha beta {i} {'cue' if i % 2 else 'other'}" for i in range(40)]
    test = [f"gamma {i} {'cue' if i % 3 else 'other'}" for i in range(30)]
    acc = bow_balanced_accuracy(train, [i % 2 == 1 for i in range(40)], test, [i % 3 != 0 for i in range(30)])
    assert acc == 1.0


def test_the_double_checking_teacher_searches_again_exactly_when_its_passage_is_not_first(worlds):
    world, d, retriever = worlds[0]
    rows = _person_rows(d / "subqueries_train.jsonl")[:60]
    teacher = ScriptedTeacherExecutor(world, double_check=True)
    first = first_searches(world, retriever, rows, K)

    async def go():
        return await asyncio.gather(
            *(run_executor(teacher, retriever, r["question"], max_turns=3) for r in rows)
        )

    kinds = set()
    for r, f, run in zip(rows, first, asyncio.run(go()), strict=True):
        gold_first = run.searches[0].doc_ids[0] == r["subject_id"]
        assert run.n_searches == (1 if gold_first else 2), r["question"]
        assert run.finish == "report" and exact_match(run.report.answer, r["golden_answers"]), r["question"]
        kinds.add((gold_first, f.needed))
    assert kinds >= {(True, False), (False, False), (False, True)}

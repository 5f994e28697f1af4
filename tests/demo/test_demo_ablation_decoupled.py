"""bench/demo_ablation_decoupled.py's figures and report: intervals over subjects, equal steps, done files."""

from __future__ import annotations

import json

from script_modules import load_script

from bench.probing.convergence import EqualStepsConfig
from bench.probing.edit import edit_first_results


def _bench():
    return load_script("bench/demo_ablation_decoupled.py")


def _run(subject, searches, hit=True, ambiguous=False):
    return {
        "id": subject,
        "subject": subject,
        "ambiguous": ambiguous,
        "hit": hit,
        "searches": searches,
        "em": 1.0,
        "tokens": 1000,
    }


def test_the_interval_resamples_subjects_not_runs():
    bench = _bench()
    # Two subjects, four runs each: one always searches twice, one never. Over runs an interval would
    # be narrow; over two subjects a resample is often all-one or all-the-other.
    runs = [_run("s1", 2) for _ in range(4)] + [_run("s2", 1) for _ in range(4)]
    f = bench.share_with_interval(runs)
    assert f["p"] == 0.5 and f["n_subjects"] == 2 and f["n_runs"] == 8
    assert f["ci95"] == [0.0, 1.0]


def test_an_interval_that_collapses_gives_the_exact_bound_over_subjects():
    bench = _bench()
    f = bench.share_with_interval([_run(f"s{i}", 1) for i in range(20) for _ in range(4)])
    assert f["ci95"] == [0.0, 0.0]
    assert f["exact_bound"][0] == "<=" and abs(f["exact_bound"][1] - (1 - 0.05 ** (1 / 20))) < 1e-12
    f = bench.share_with_interval([_run(f"s{i}", 2) for i in range(20)])
    assert f["exact_bound"][0] == ">=" and abs(f["exact_bound"][1] - 0.05 ** (1 / 20)) < 1e-12
    assert "exact" in bench._fmt_share(f)


def test_the_selectivity_gap_pairs_the_variants_by_subject():
    bench = _bench()
    # (c) searches again on every miss and never on a hit; the control searches again on everything
    subjects = [(f"s{i}", i % 2 == 0) for i in range(10)]
    c = [_run(s, 1 if hit else 2, hit=hit) for s, hit in subjects for _ in range(4)]
    control = [_run(s, 2, hit=hit) for s, hit in subjects for _ in range(4)]
    assert bench.selectivity(c) == 1.0 and bench.selectivity(control) == 0.0
    g = bench.selectivity_gap(c, control)
    assert g["gap"] == 1.0 and g["ci95"] == [1.0, 1.0] and g["n_subjects"] == 10
    # the same student against itself: a gap of exactly 0 in every resample (the draw is shared)
    mixed = [_run(s, 1 + (i % 2), hit=hit) for s, hit in subjects for i in range(4)]
    assert bench.selectivity_gap(mixed, mixed)["ci95"] == [0.0, 0.0]
    assert bench.selectivity([_run("s", 2, hit=True)]) is None  # no run on the miss side


def test_done_only_renders_from_done_files_and_records_equal_steps(tmp_path):
    bench = _bench()
    first = [{"sub_query": f"Who {i}", "doc1": f"text {i % 3}", "needed": i % 2 == 0} for i in range(12)]
    from executor_sft.synthetic import DECOUPLED_WORLD

    world = {
        "seed": 0,
        "key": {
            "config": {"entities": 1800, "questions": 1200},
            "world": {**DECOUPLED_WORLD, "test_share": 0.1},
        },
        "shortcuts": {
            "sub_query": 0.5,
            "doc1": 0.5,
            "n_train": 12,
            "n_test": 12,
            "needed_train": 6,
            "needed_test": 6,
        },
        "first_searches": {"train": first, "test": first},
        "teacher": [_run("s1", 1), _run("s2", 2, hit=False)],
        "bare_test": ["s4"],
    }
    (tmp_path / "seed0-world.json").write_text(json.dumps(world))
    for v in ("c", "m", "a"):
        unit = {
            "seed": 0,
            "variant": v,
            "steps": 40,
            "rows": 20,
            "two_search_rows": 5,
            "key": {"config": {"max_length": 2048}},
            "longest_row_tokens": 1333,
            "runs": [
                _run("s1", 2),
                _run("s2", 2, hit=False),
                _run("s3", 2, ambiguous=True, hit=False),
                _run("s4", 1),  # names no descriptor: a hit, one search
            ],
            "probe": {
                "miss": {"n": 1, "as_collected": 0.9, "edited": 0.2},
                "hit": {"n": 0, "as_collected": None, "edited": None},
            },
        }
        (tmp_path / f"seed0-{v}.json").write_text(json.dumps(unit))
    md, data = bench.render(tmp_path, "python bench/demo_ablation_decoupled.py --done_only")
    assert data["steps_equal_within_seed"] and set(data["steps"].values()) == {40}
    assert data["shortcuts"]["0"]["sub_query"] == 0.5 and data["shortcuts_pooled"]["n_test"] == 12
    assert data["variants"]["m"]["0"]["plain_miss"]["p"] == 1.0
    assert (
        data["variants"]["m"]["0"]["all_miss"]["n_runs"] == 2
        and data["variants"]["m"]["0"]["all_hit"]["p"] == 0.5
    )
    # selective over all runs only through the sub-query naming no descriptor; blind without it
    assert data["selectivity_named"]["seed0-c"]["all"] == 0.5
    assert data["selectivity_named"]["seed0-c"]["named"] == 0.0
    assert "| 0 | (c) full filter | +50.0 | +0.0 |" in md and "| 3 of 4 |" in md
    assert "(a') matched control" in md and "3 of 3" in md
    assert "SFT max_length: 2048; no row shortened (the longest: 1333 tokens)" in md
    assert (
        "World: `DECOUPLED_WORLD` (docs/synthetic.md), test_share 0.1, 1800 entities, 1200 questions;" in md
    )
    assert data["world"]["entities"] == 1800 and data["world"]["options"]["test_share"] == 0.1


def test_the_ablation_refuses_rows_the_fit_would_shorten():
    """A shortened row marks itself; the bench stops before training rather than teach that cue."""
    import pytest

    bench = _bench()
    cfg = bench.seed_config(
        bench.argparse.Namespace(config=str(bench.REPO / "recipes/configs/demo.yaml"), out="x"), 0
    )
    row = {"messages": [{"role": "user", "content": "Who?"}, {"role": "tool", "content": "word " * 3000}]}
    with pytest.raises(SystemExit, match="1 of 1 rows exceed max_length=2048"):
        bench.check_whole([row], cfg)
    assert bench.check_whole([{"messages": row["messages"][:1]}], cfg) < 50
    world = bench.world_options()
    assert "max_length" in bench._key(cfg, world)["config"]
    assert "max_length" not in bench._world_key(cfg, world)["config"]
    assert bench.world_options(0.1)["test_share"] == 0.1 and world["test_share"] == 0.3


def test_equal_steps_override_epochs_and_never_stop_early():
    conv = EqualStepsConfig(max_steps=376, epochs=2)
    assert conv.training_overrides()["max_steps"] == 376
    assert conv.plateau_rule() is None


def _row(question: str, searches: int) -> dict:
    call = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "search"}}]}
    turns = [call, {"role": "tool", "content": "Doc 1 ..."}] * searches
    return {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": question}, *turns]}


def test_the_rows_about_people_are_counted_by_kind_first_results_and_searches(tmp_path):
    from bench.probing.surface import FirstSearch

    bench = _bench()
    people = [
        ("In what year was A born?", "single_hop", False),
        ("In what year was B (singer) born?", "single_hop_ambiguous", True),
        ("In which city was C born?", "single_hop", True),
    ]
    (tmp_path / "subqueries_train.jsonl").write_text(
        "".join(
            json.dumps({"question": q, "type": t, "relation": "birth_year", "subject_id": f"person-{i}"})
            + "\n"
            for i, (q, t, _) in enumerate(people)
        )
        + json.dumps({"question": "Who founded D?", "type": "single_hop", "relation": "founded_by"})
        + "\n"
    )
    first = [FirstSearch(q, "Doc 1", missed) for q, _, missed in people]
    rows = [_row(people[0][0], 1), _row(people[1][0], 2), _row(people[2][0], 2), _row(people[2][0], 1)]
    rows.append(_row("Who founded D?", 2))  # not about a person: not counted
    counts = bench.row_makeup(rows, tmp_path, first)
    assert {k: v for k, v in counts.items() if v} == {
        "plain_hit_1": 1,
        "amb_miss_2": 1,
        "plain_miss_2": 1,
        "plain_miss_1": 1,
    }
    unit = {"seed": 0, "variant": "c", "person_rows": counts}
    fitted = {**unit, "variant": "m", "fit_probe": {"miss": {"n": 3, "p": 0.5}, "hit": {"n": 0, "p": None}}}
    lines = bench.row_lines([unit, fitted, {"seed": 0, "variant": "a"}])
    assert lines[-2:] == [
        "| 0 | (c) full filter | 1 / 0 | 1 / 1 | 0 / 0 | 0 / 1 | 2 of 2 | - |",
        "| 0 | (a') matched control | 1 / 0 | 1 / 1 | 0 / 0 | 0 / 1 | 2 of 2 | 50.0 (n=3) / - |",
    ]


def _doc_lines(world, entities) -> str:
    return "\n".join(f"Doc {i + 1} (Title: {e.name}) {world.passage_text(e)}" for i, e in enumerate(entities))


def test_an_edit_puts_the_gold_passage_first_on_a_miss_and_swaps_it_out_on_a_hit():
    from executor_sft.synthetic import DECOUPLED_WORLD, generate_world

    world = generate_world(0, 200, 60, **DECOUPLED_WORLD)
    people = [e for e in world.entities if e.type == "person"]

    def namesakes(e):
        return [
            n for n in people if n.kind == "namesake" and (n.name == e.name or n.extra.get("twin_of") == e.id)
        ]

    gold = next(e for e in people if e.kind == "core" and len(namesakes(e)) >= 3)
    others = namesakes(gold)

    def prompt(shown):
        return [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": ""},
                {"role": "tool", "content": _doc_lines(world, shown)}]  # fmt: skip

    missed = prompt(others[:3])
    side, edited = edit_first_results(world, missed, gold.id)
    assert side == "miss" and edited[2]["content"].split("\n")[0] == _doc_lines(world, [gold])
    assert edited[2]["content"].split("\n")[1:] == missed[2]["content"].split("\n")[1:]
    assert missed[2]["content"] == _doc_lines(world, others[:3])  # the prompt given is not changed
    held = prompt([others[0], gold, others[1]])
    side, edited = edit_first_results(world, held, gold.id)
    swapped_in = world.entity_of_passage("", edited[2]["content"].split("\n")[1].split(") ", 1)[-1])
    assert side == "hit" and swapped_in in others[2:]  # a namesake not already shown, in the gold's place
    assert world.passage_text(gold) not in edited[2]["content"]
    assert [ln for k, ln in enumerate(edited[2]["content"].split("\n")) if k != 1] == [
        ln for k, ln in enumerate(held[2]["content"].split("\n")) if k != 1
    ]
    # every namesake already shown: nothing same-worded is left to swap in
    assert edit_first_results(world, prompt([gold, *others]), gold.id) is None


def test_the_own_rows_edit_table_shows_units_that_recorded_it():
    bench = _bench()
    side = {"n": 4, "p": 0.5, "n_edited": 3, "as_collected": 0.6, "edited": 0.1}
    units = [
        {"seed": 0, "variant": "c", "fit_probe": {"miss": side, "hit": {**side, "edited": None}}},
        {"seed": 0, "variant": "m", "fit_probe": {"miss": {"n": 2, "p": 0.5}, "hit": {"n": 0, "p": None}}},
    ]
    lines = bench.own_rows_edited_lines(units)
    assert lines[-1] == "| 0 | (c) full filter | 60.0 (n=3) | 10.0 (n=3) | 60.0 (n=3) | - |"
    assert not any("matched control" in line for line in lines)
    assert bench.own_rows_edited_lines(units[1:]) == []

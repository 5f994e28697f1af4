"""bench/demo_ablation.py's core on the tiny demo config: one seed, two variants, resume."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from script_modules import load_script

from executor_sft.demos.demo import load_config

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "configs" / "demo_tiny.yaml"


def _bench():
    return load_script("bench/demo_ablation.py")


def test_conclusions_follow_the_numbers():
    bench = _bench()
    amb, plain = f"p2:{bench.AMBIGUOUS}", f"p2:{bench.PLAIN}"
    good = {
        "a": {plain: {"mean": 0.4, "std": None}, "tokens": {"mean": 1500, "std": None}},
        "b": {amb: {"mean": 0.0, "std": None}},
        "c": {
            amb: {"mean": 0.8, "std": None},
            plain: {"mean": 0.1, "std": None},
            "tokens": {"mean": 1200, "std": None},
        },
    }
    lines = bench.conclusions(good)
    assert all("as expected" in line for line in lines[:3]) and lines[3].startswith("3 of 3")
    bad = json.loads(json.dumps(good))
    bad["c"]["tokens"]["mean"] = 1600
    lines = bench.conclusions(bad)
    assert "contrary to the expectation" in lines[2] and lines[3].startswith("2 of 3")
    assert bench.conclusions({"b": good["b"]}) == ["No comparison: variant (c) with (a) or (b) is needed."]


def test_where_needed_is_judged_per_seed():
    bench = _bench()
    amb, plain = f"p2:{bench.AMBIGUOUS}", f"p2:{bench.PLAIN}"

    def seed(n, p, a):
        return {"seed": n, "variants": {"c": {"eval": {plain: p, amb: a}}}}

    # The mean over seeds (ambiguous 20.8% vs plain 33.3%) hides that no seed learnt the rule.
    line = bench.where_needed([seed(0, 1.0, 0.625), seed(1, 0.0, 0.0), seed(2, 0.0, 0.0)], "c")
    assert "(seed 0 100.0/62.5, seed 1 0.0/0.0, seed 2 0.0/0.0%)" in line
    assert "more on ambiguous than on plain in 0 of 3 seed(s), never twice in 2." in line
    assert "in 1 of 1 seed(s)" in bench.where_needed([seed(0, 0.1, 0.9)], "c")
    assert bench.where_needed([seed(0, 0.1, 0.9)], "a") is None


@pytest.mark.slow
def test_ablation_core_runs_two_variants_and_resumes_without_retraining(tmp_path, monkeypatch):
    bench = _bench()
    cfg = load_config(TINY, {"out": str(tmp_path / "seed0")})
    steps = []
    modes = ("mean@2:0.6", "greedy")
    result = bench.run_seed(
        cfg, ["b", "c"], per_type=3, modes=modes, show_progress=False, on_step=lambda p: steps.append(1)
    )
    assert len(steps) == 4  # two references, two variants
    assert result["eval_set"] == {bench.PLAIN: 3, bench.AMBIGUOUS: 3}
    assert set(result["variants"]["b"]["sft_rows"]) == {"single_search"}
    assert set(result["variants"]["c"]["sft_rows"]) == {"single_search", "info_gain_multi_search"}
    teacher = result["references"]["teacher"]
    # The scripted teacher searches twice exactly where the first search cannot succeed.
    assert teacher[f"p2:{bench.AMBIGUOUS}"] == 1.0 and teacher[f"p2:{bench.PLAIN}"] == 0.0
    for v in ("b", "c"):
        sampled, greedy = (result["variants"][v]["evals"][m] for m in modes)
        assert result["variants"][v]["eval"] == sampled
        # mean@2: two runs of every sub-query; greedy: one.
        assert sampled["n"] == 12 and sampled[f"n:{bench.PLAIN}"] == sampled[f"n:{bench.AMBIGUOUS}"] == 6
        assert greedy["n"] == 6 and greedy[f"n:{bench.PLAIN}"] == greedy[f"n:{bench.AMBIGUOUS}"] == 3
        assert sampled["mechanism"]["n_items"] == [3, 3] and sampled["mechanism"]["n_runs"] == [6, 6]
    # The seed's mechanism is (c)'s, from the first mode.
    mech = result["variants"]["c"]["eval"]["mechanism"]
    assert result["mechanism"] == {"variant": "c", "diff": mech["diff"], "ci95": mech["ci95"]}
    assert mech["diff"] == pytest.approx(
        result["variants"]["c"]["eval"][f"p2:{bench.AMBIGUOUS}"]
        - result["variants"]["c"]["eval"][f"p2:{bench.PLAIN}"]
    )
    assert "c_vs_a" not in result  # no (a) in this run

    # Per-type numbers from the per-run JSONL equal the evaluator's (or are the fallback itself).
    subs = bench.balanced_subqueries(tmp_path / "seed0" / "world" / "subqueries_test.jsonl", 3)
    ev = result["variants"]["c"]["eval"]
    bare = SimpleNamespace(**{k: ev[k] for k in ("n", "format_valid", "em", "searches_mean", "seconds")})
    bare.share_2plus_searches, bare.tokens_per_subquery = ev["p2"], ev["tokens"]
    runs = tmp_path / "seed0" / "variant-c" / "eval-mean2_t0.6" / "eval.jsonl"
    fallback = bench._summary(bare, runs, subs)
    assert fallback.pop("mechanism") == ev["mechanism"]
    assert fallback == pytest.approx({k: v for k, v in ev.items() if k not in ("mechanism", "follow")})
    # The scripted teacher searches again exactly when its first results miss the gold passage.
    follow = teacher["follow"]
    assert follow["p2_no_gold_first"] == 1.0 and follow["p2_gold_first"] in (0.0, None)
    assert follow["n_gold_first"] + follow["n_no_gold_first"] == 6
    assert follow["n_descriptor"] + follow["n_no_descriptor"] == 6

    # Resume: nothing is collected, trained or evaluated again.
    def refuse(*args, **kwargs):
        raise AssertionError("resumed run redid a finished step")

    for name in ("train_demo", "collect_demo", "evaluate"):
        monkeypatch.setattr(bench, name, refuse)
    again = bench.run_seed(cfg, ["b", "c"], per_type=3, modes=modes, show_progress=False)
    assert again["variants"] == result["variants"] and again["references"] == result["references"]
    # A mode read back for some checkpoints and new for none: still nothing redone, in any order.
    assert bench.run_seed(cfg, ["c"], per_type=3, modes=modes[::-1], show_progress=False)["mechanism"]

    text = bench.render([again], "python bench/demo_ablation.py ...", 1.0)
    assert "| seed | diff (points) | 95% interval |" in text and "mean@2, T=0.6" in text
    assert "evaluated in each mode side by side" in text
    assert "| 0 | scripted teacher | " in text and "second query = first query" in text
    assert "What the SFT rows teach the second query: seed 0 (b): 0 rows search twice" in text
    rows = sum(again["variants"]["b"]["sft_rows"].values())
    assert f"| (b) single_search only | {rows} |" in text and "| (c) full filter |" in text
    assert "scripted teacher (reference)" in text and "Made with:" in text


def test_eval_modes_parse_and_bad_ones_are_refused():
    bench = _bench()
    assert bench.parse_eval("greedy") == (1, 0.0) and bench.parse_eval("mean@4:0.6") == (4, 0.6)
    for bad in ("mean@0:0.6", "mean@4:0", "mean4:0.6", "sample", "mean@4"):
        with pytest.raises(Exception, match="use 'greedy' or 'mean@N:T'"):
            bench.parse_eval(bad)


def test_mechanism_verdict_is_per_seed_and_needs_three():
    bench = _bench()

    def seed(n, diff, lo):
        return {"seed": n, "mechanism": {"variant": "c", "diff": diff, "ci95": [lo, diff + 0.1]}}

    shown = bench.mechanism_lines([seed(0, 0.2, 0.05), seed(1, 0.1, -0.02), seed(2, 0.3, 0.1)])
    assert "| 1 | +10.0 | [-2.0, +20.0] | - / - | - / - |" in shown
    assert (
        "above zero on 3 of 3 seed(s), and its interval excludes zero on 2; the mechanism is shown"
        in "".join(shown)
    )
    not_shown = "".join(bench.mechanism_lines([seed(0, 0.2, 0.05), seed(1, 0.0, 0.0), seed(2, 0.3, 0.1)]))
    assert "above zero on 2 of 3" in not_shown and "is not shown" in not_shown
    assert "is not shown" in "".join(bench.mechanism_lines([seed(0, 0.2, 0.05)]))  # one seed is not enough
    assert bench.mechanism_lines([{"seed": 0}]) == []


def test_second_search_follow_splits_runs_by_what_the_first_search_returned(tmp_path):
    bench = _bench()

    def run(qid, *searches):
        return {
            "score": {"id": qid},
            "run": {"searches": [{"query": q, "doc_ids": docs} for q, docs in searches]},
        }

    subs = [
        SimpleNamespace(id="p", question="Who founded Tavo (singer)?", positive_doc_ids=["g1"]),
        SimpleNamespace(id="x", question="When was X founded?", positive_doc_ids=[]),
    ]
    rows = [
        run("p", ("A b", ["g1", "n"])),  # first results hold gold, stops
        run("p", ("A b", ["g1"]), (" a  B ", ["g1"])),  # holds gold, repeats its query
        run("p", ("A", ["n"]), ("A other", ["g1"])),  # misses, searches again with a new query
        run("p"),  # no search: not counted
        run("x", ("q", ["d"])),  # no gold passage known: not counted
    ]
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert bench.second_search_follow(path, subs) == {
        "n_gold_first": 2,
        "p2_gold_first": 0.5,
        "n_no_gold_first": 1,
        "p2_no_gold_first": 1.0,
        "n_descriptor": 4,
        "p2_descriptor": 0.5,
        "n_no_descriptor": 1,
        "p2_no_descriptor": 0.0,
        "n_two_search": 2,
        "repeat_query": 0.5,
    }


def test_two_search_rows_count_what_the_second_query_does(tmp_path):
    bench = _bench()

    def row(sub_query, *queries):
        calls = [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "search", "arguments": args}}],
            }
            for args in ({"query": q} if i % 2 else json.dumps({"query": q}) for i, q in enumerate(queries))
        ]
        return {
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": sub_query}, *calls]
        }

    rows = [
        row("Where was Ann Lee (singer) born?", "Ann Lee born", "Ann Lee singer born"),  # adds it
        row("Where was Ann Lee (singer) born?", "Ann Lee born", "ann  lee BORN"),  # repeats
        row("Where was Bo Tan born?", "Bo Tan born", "Bo Tan birthplace"),  # no descriptor
        row("Where was Cy (poet) born?", "Cy born"),  # one search: not counted
    ]
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert bench.two_search_rows(path) == {"rows": 3, "repeat_first_query": 1, "add_descriptor": 1}


def _curve(*diffs):
    return [
        {"step": 4 * (i + 1), "epoch": 0.5 * (i + 1), "p_plain": 0.2, "p_ambiguous": 0.2 + d, "diff": d,
         "ci95": [d - 0.125, d + 0.125], "loss": 1.0, "heldout_loss": 1.2}
        for i, d in enumerate(diffs)
    ]  # fmt: skip


def test_tables_over_uneven_seeds_say_so_instead_of_comparing_means():
    bench = _bench()
    both = [{"seed": s, "variants": {"a": {}, "c": {}}} for s in (0, 1)]
    assert bench.uneven_lines(both) == []
    partial = [both[0], {"seed": 1, "variants": {"c": {}}}]
    (line,) = bench.uneven_lines(partial)
    assert line.startswith("Not every variant has every seed yet ((a) seed 0; (c) seed 0, 1)")


def test_probe_entry_and_lines_come_from_the_final_checkpoint():
    bench = _bench()
    from bench.probing.convergence import ConvergenceConfig

    cfg = load_config(TINY, {}).model_dump()
    c = {"eval": {}, "probe_curve": _curve(0.0, 0.125, 0.25), "stopped": "plateau", "sft_rows": {}}
    seed = {"seed": 0, "config": cfg, "convergence": ConvergenceConfig().model_dump(), "variants": {"c": c}}
    assert bench.seed_verdict(seed) == {"probe": {"diff": 0.25, "ci95": [0.125, 0.375], "step": 12}}
    lines = bench.probe_lines([seed])
    assert "| 0 | (c) | 12 | 1.50 | plateau | 20.0 | 45.0 | +25.0 [+12.5, +37.5] | 1.000 | 1.200 |" in lines
    assert any("3 epochs, probe and checkpoint every 8 steps" in line for line in lines)
    assert bench.probe_lines([{**seed, "variants": {"c": {**c, "probe_curve": []}}}]) == []


@pytest.mark.slow
def test_convergence_mode_records_the_probe_curve_and_resumes_from_done_dir(tmp_path, monkeypatch):
    bench = _bench()
    from bench.probing.convergence import ConvergenceConfig

    cfg = load_config(TINY, {"out": str(tmp_path / "seed0")})
    conv = ConvergenceConfig(epochs=1, probe_every=3, heldout_rows=2)
    done = tmp_path / "done"
    result = bench.run_seed(
        cfg, ["c"], per_type=2, modes=("greedy",), references=(), convergence=conv, done_dir=done,
        show_progress=False,
    )  # fmt: skip
    c = result["variants"]["c"]
    steps = [r["step"] for r in c["probe_curve"]]
    assert steps == sorted(set(steps)) and steps[0] == 3 and c["stopped"] in ("epochs", "plateau")
    assert c["heldout_rows"] == 2 and all(r["heldout_loss"] > 0 for r in c["probe_curve"])
    assert result["probe"]["step"] == steps[-1] and "mechanism" in result
    assert result["references"].keys() == {"teacher"}  # the probe's prompts are the teacher's
    assert result["probe_prompts"] == {bench.PLAIN: 2, bench.AMBIGUOUS: 2}
    saved = json.loads((done / "seed0-c.json").read_text(encoding="utf-8"))
    assert saved["result"] == c and "out" not in saved["key"]["config"]
    png = bench.plot_seed(result, tmp_path / "img")
    assert png.name == "demo_ablation_probe_seed0.png" and png.stat().st_size > 0

    # Another machine (another --out) with the committed result: nothing is trained or evaluated.
    def refuse(*args, **kwargs):
        raise AssertionError("a finished (variant, seed) was redone")

    monkeypatch.setattr(bench, "train_demo", refuse)
    monkeypatch.setattr(bench, "evaluate", refuse)
    other = cfg.model_copy(update={"out": str(tmp_path / "elsewhere" / "seed0")})
    monkeypatch.setattr(bench, "run_reference", lambda *a, **k: {"eval": result["references"]["teacher"]})
    prompts = bench.turn2_prompts(tmp_path / "seed0" / "ref-teacher" / "eval.jsonl", bench.TYPES)
    monkeypatch.setattr(bench, "turn2_prompts", lambda *a, **k: prompts)
    again = bench.run_seed(
        other, ["c"], per_type=2, modes=("greedy",), references=(), convergence=conv, done_dir=done,
        show_progress=False,
    )  # fmt: skip
    assert again["variants"]["c"] == c and again["probe"] == result["probe"]

    # Tables from the finished units only: (b) has no result in done_dir, so it is left out, untrained.
    partial = bench.run_seed(
        other, ["c", "b"], per_type=2, modes=("greedy",), references=(), convergence=conv, done_dir=done,
        show_progress=False, done_only=True,
    )  # fmt: skip
    assert partial["variants"].keys() == {"c"} and partial["mechanism"] == result["mechanism"]

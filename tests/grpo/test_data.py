"""GRPO rows from rollouts: which teacher runs become references, dedup, prompts, errors."""

from __future__ import annotations

import json

import pytest

from executor_sft.agents.prompting import Prompts
from executor_sft.filters.records import RecordError
from executor_sft.grpo.data import (
    GRPODataReport,
    grpo_examples_from_rollouts,
    load_jsonl,
    to_dataset,
    write_jsonl,
)
from executor_sft.schema import Episode, ExecutorRun, Outcome, Question, Report

RECORDED_SYSTEM = "Recorded executor prompt: search, then report."


def run(
    run_id,
    sub_query,
    answer="Paris",
    role="teacher",
    em=1.0,
    judge=True,
    finish="report",
    cf=None,
    system=True,
    idx=0,
):
    messages = [{"role": "user", "content": sub_query}]
    if system:
        messages.insert(0, {"role": "system", "content": RECORDED_SYSTEM})
    messages.append({"role": "assistant", "content": f"<answer>{answer}</answer>"})
    return ExecutorRun(
        run_id=run_id,
        round=0,
        sub_query_index=idx,
        sub_query=sub_query,
        role=role,
        model="m",
        max_turns=3,
        max_searches=2,
        messages=messages,
        n_searches=1,
        finish=finish,
        report=Report(answer=answer) if finish == "report" else None,
        outcome=Outcome(answer=answer, em=em, f1=em, judge=judge),
        counterfactual_of=cf,
    )


def episode(eid, runs, qid="q1", dataset="hotpotqa"):
    q = Question(id=qid, question="Q?", golden_answers=["A"], dataset=dataset)
    return Episode(episode_id=eid, question=q, runs=runs)


def write_rollouts(path, episodes):
    path.write_text("".join(e.to_json() + "\n" for e in episodes), encoding="utf-8")
    return path


@pytest.fixture()
def rollouts(tmp_path):
    eps = [
        episode(
            "e1",
            [
                run("t1", "What is the capital of France?", "Paris"),
                run("s1", "What is the capital of France?", "Paris", role="student"),
                run("t2", "Who wrote Hamlet?", "Shakespeare", judge=None, idx=1),  # judge missing
                run("t3", "Where is Lyon?", "Italy", em=0.0, judge=False, idx=2),  # wrong
            ],
        ),
        episode(
            "e2",
            [
                # duplicates of t1's sub-query: a new alias, then one equal to "Paris" after normalisation
                run("t4", "  what is the capital  of france? ", "City of Paris"),
                run("t5", "what is the capital of France?", "paris"),
                run("t6", "Who painted the Mona Lisa?", "Leonardo da Vinci", finish="invalid", idx=1),
                run("t7", "Who painted the Mona Lisa?", "Leonardo", cf="t0", idx=1),  # a counterfactual
                run("t8", "How tall is the Eiffel Tower?", "330 m", system=False, idx=2),
            ],
            qid="q2",
            dataset="2wiki",
        ),
    ]
    return write_rollouts(tmp_path / "rollouts.jsonl", eps)


def test_only_verified_teacher_reports(rollouts):
    report = GRPODataReport()
    rows = grpo_examples_from_rollouts(rollouts, report=report)
    assert [r["sub_query"] for r in rows] == [
        "What is the capital of France?",
        "How tall is the Eiffel Tower?",
    ]
    assert rows[0]["reference"] == ["Paris", "City of Paris"]  # dedup keeps aliases, normalised
    assert (
        rows[0]["source_run_id"] == "t1"
        and rows[0]["question_id"] == "q1"
        and rows[0]["dataset"] == "hotpotqa"
    )
    assert rows[1]["episode_id"] == "e2" and rows[1]["dataset"] == "2wiki"
    assert report.episodes == 2 and report.examples == 2
    assert report.duplicates == 2 and report.extra_aliases == 1
    assert report.excluded == {"judge_null": 1, "wrong_em": 1, "not_report": 1, "counterfactual": 1}
    assert "2 GRPO examples" in report.summary()


def test_judge_optional_and_roles(rollouts):
    rows = grpo_examples_from_rollouts(rollouts, require_judge=False)
    assert "Who wrote Hamlet?" in [r["sub_query"] for r in rows]
    rows = grpo_examples_from_rollouts(rollouts, roles=("student",))
    assert [(r["sub_query"], r["source_run_id"]) for r in rows] == [("What is the capital of France?", "s1")]


def test_prompt_is_system_plus_sub_query(rollouts, tmp_path):
    rows = grpo_examples_from_rollouts(rollouts)
    # default: the system prompt recorded in the teacher run (what SFT trained on) ...
    assert rows[0]["prompt"] == [
        {"role": "system", "content": RECORDED_SYSTEM},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    # ... or the packaged executor prompt when the run has none, with the budget filled in
    packaged = Prompts().render("executor_native", top_k=5, max_searches=1)
    rows = grpo_examples_from_rollouts(rollouts, top_k=5, max_searches=1)
    assert rows[1]["prompt"][0] == {"role": "system", "content": packaged}
    assert "{top_k}" not in packaged and "top 5 passages" in packaged
    # an explicit prompt (text or file:) replaces both
    prompt_file = tmp_path / "p.md"
    prompt_file.write_text("Use {max_searches} searches of {top_k} docs.", encoding="utf-8")
    rows = grpo_examples_from_rollouts(rollouts, system_prompt=f"file:{prompt_file}", top_k=2, max_searches=4)
    assert {r["prompt"][0]["content"] for r in rows} == {"Use 4 searches of 2 docs."}


def test_jsonl_roundtrip_and_dataset(rollouts, tmp_path):
    rows = grpo_examples_from_rollouts(rollouts)
    out = tmp_path / "sub" / "grpo.jsonl"
    write_jsonl(out, rows)
    assert load_jsonl(out) == rows
    ds = to_dataset(load_jsonl(out))
    assert len(ds) == 2 and {"prompt", "reference", "sub_query"} <= set(ds.column_names)
    assert ds[0]["prompt"][1]["content"] == "What is the capital of France?"


def test_errors_name_file_line_and_field(tmp_path):
    good = episode("e1", [run("t1", "Q one?")])
    bad = episode("e2", [run("t2", "Q two?")]).to_dict()
    del bad["runs"][0]["sub_query"]
    path = tmp_path / "r.jsonl"
    path.write_text(good.to_json() + "\n\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match=r"r\.jsonl:3: field 'runs\[0\]\.sub_query'"):
        grpo_examples_from_rollouts(path)
    path.write_text(good.to_json() + "\n{not json}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"r\.jsonl:2: invalid JSON"):
        grpo_examples_from_rollouts(path)
    # a last line cut off by a killed writer is skipped
    path.write_text(good.to_json() + "\n" + '{"episode_id": "e3", "ru', encoding="utf-8")
    assert len(grpo_examples_from_rollouts(path)) == 1
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        grpo_examples_from_rollouts(tmp_path / "missing.jsonl")


def test_load_jsonl_checks_columns(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "q"}], "reference": "A"}\n', encoding="utf-8")
    assert load_jsonl(path)[0]["reference"] == ["A"]
    path.write_text('{"prompt": "q", "reference": ["A"]}\n', encoding="utf-8")
    with pytest.raises(RecordError, match=r"g\.jsonl:1: field 'prompt'"):
        load_jsonl(path)
    path.write_text('{"prompt": [{"role": "user", "content": "q"}]}\n', encoding="utf-8")
    with pytest.raises(RecordError, match=r"g\.jsonl:1: field 'reference'"):
        load_jsonl(path)


def test_no_examples_is_an_error(tmp_path):
    path = write_rollouts(tmp_path / "r.jsonl", [episode("e1", [run("t1", "Q?", em=0.0, judge=False)])])
    assert grpo_examples_from_rollouts(path) == []
    with pytest.raises(ValueError, match="no GRPO examples"):
        to_dataset([])


def test_rows_do_not_depend_on_the_order_runs_finished_in(tmp_path):
    """The project's sample rollouts, and the same episodes in reverse order: the same rows."""
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "data" / "rollouts.jsonl"
    lines = sample.read_text(encoding="utf-8").splitlines(keepends=True)
    reversed_file = tmp_path / "rollouts.jsonl"
    reversed_file.write_text("".join(reversed(lines)), encoding="utf-8")
    rows = grpo_examples_from_rollouts(sample, require_judge=False)
    assert len(rows) > 10
    assert grpo_examples_from_rollouts(reversed_file, require_judge=False) == rows

"""Input handling: plain dicts from other writers, missing/extra fields, file:line errors."""

from __future__ import annotations

import json

import pytest
from filters_helpers import as_dicts, episode, run

from executor_sft.filters import (
    FilterConfig,
    RecordError,
    filter_episodes,
    iter_jsonl,
)


def _minimal_episode() -> dict:
    """Only the fields the filter reads, as another tool might write them."""
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "sub-query"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"type": "function", "function": {"name": "search", "arguments": '{"query": "q"}'}}
            ],
        },
        {"role": "tool", "content": "Doc 1 (Title: T) t"},
        {"role": "assistant", "content": "<answer>a</answer>"},
    ]
    return {
        "episode_id": "ext-1",
        "question": {"id": "Q1"},
        "runs": [
            {
                "run_id": "r1",
                "role": "teacher",
                "round": 0,
                "sub_query_index": 0,
                "searches": [{"query": "q"}],
                "finish": "report",
                "outcome": {"em": 1, "judge": True},
                "messages": msgs,
            },
            {
                "run_id": "r2",
                "role": "student",
                "round": 0,
                "sub_query_index": 1,
                "n_searches": 1,
                "finish": "report",
                "outcome": None,
            },
        ],
    }


def test_minimal_foreign_records():
    result = filter_episodes([_minimal_episode()])
    (row,) = result.rows
    assert (row["source_run_id"], row["question_id"], row["dataset"], row["stratum"]) == (
        "r1",
        "Q1",
        "unknown",
        "single_search",
    )
    assert row["messages"][2]["tool_calls"] == [  # a lone call without an id gets one, as its answer does
        {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": {"query": "q"}}}
    ]
    assert row["messages"][3]["tool_call_id"] == "call_2"
    assert result.report["exclusions"] == {"no_outcome": 1}


def test_extra_fields_ignored():
    ep = episode("e", [run("t", "teacher", 1)]).to_dict()
    ep["future_field"] = {"x": 1}
    ep["runs"][0]["calls"] = [{"model": "m"}]
    ep["runs"][0]["outcome"]["judge_raw"] = "True."
    ep["question"]["extra"] = [1, 2]
    assert len(filter_episodes([ep]).rows) == 1


def test_schema_models_accepted_directly():
    assert len(filter_episodes([episode("e", [run("t", "teacher", 1)])]).rows) == 1


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("episode_id",), "episode_id"),
        (("question",), "question"),
        (("question", "id"), "question.id"),
        (("runs",), "runs"),
        (("runs", 1, "role"), "runs[1].role"),
        (("runs", 1, "run_id"), "runs[1].run_id"),
        (("runs", 0, "round"), "runs[0].round"),
        (("runs", 0, "sub_query_index"), "runs[0].sub_query_index"),
        (("runs", 0, "finish"), "runs[0].finish"),
    ],
)
def test_missing_required_field_names_file_line_and_field(tmp_path, path, field):
    eps = as_dicts(
        episode("e1", [run("t", "teacher", 1)]),
        episode("e2", [run("s", "student", 1), run("t", "teacher", 1)]),
    )
    target = eps[1]
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    file = tmp_path / "rollouts.jsonl"
    file.write_text("".join(json.dumps(e) + "\n" for e in eps), encoding="utf-8")
    with pytest.raises(RecordError) as info:
        filter_episodes(iter_jsonl(file))
    assert info.value.where == f"{file}:2"
    assert info.value.field == field
    assert f"{file}:2: field '{field}' is missing" in str(info.value)


def test_n_searches_falls_back_to_searches_and_else_errors():
    ep = episode("e", [run("t", "teacher", 1)]).to_dict()
    del ep["runs"][0]["n_searches"]
    assert filter_episodes([ep]).rows[0]["stratum"] == "single_search"
    del ep["runs"][0]["searches"]
    with pytest.raises(RecordError, match=r"record 1: field 'runs\[0\].n_searches' is missing"):
        filter_episodes([ep])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("round", "0", "must be an integer"),
        ("n_searches", 1.5, "must be an integer"),
        ("outcome", "yes", "must be an object or null"),
        ("messages", "hi", "must be a list"),
    ],
)
def test_wrong_types_name_the_field(field, value, message):
    ep = episode("e", [run("t", "teacher", 1)]).to_dict()
    ep["runs"][0][field] = value
    with pytest.raises(RecordError, match=rf"field 'runs\[0\]\.{field}' {message}"):
        filter_episodes([ep])


def test_judge_must_be_boolean_or_null():
    ep = episode("e", [run("t", "teacher", 1)]).to_dict()
    ep["runs"][0]["outcome"]["judge"] = "True"
    with pytest.raises(RecordError, match=r"runs\[0\]\.outcome\.judge"):
        filter_episodes([ep])


def test_missing_messages_only_matter_for_kept_runs():
    ep = episode("e", [run("s", "student", 1, em=0.0), run("t", "teacher", 1)]).to_dict()
    del ep["runs"][0]["messages"]  # excluded anyway
    assert len(filter_episodes([ep]).rows) == 1
    del ep["runs"][1]["messages"]
    with pytest.raises(RecordError, match=r"runs\[1\]\.messages' is missing"):
        filter_episodes([ep])


def test_malformed_json_line_names_file_and_line(tmp_path):
    file = tmp_path / "rollouts.jsonl"
    good = json.dumps(episode("e1", [run("t", "teacher", 1)]).to_dict())
    file.write_text(f"{good}\n\n{{not json\n{good}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{file}:3: invalid JSON"):
        list(iter_jsonl(file))
    file.write_text(f"{good}\n[1, 2]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{file}:2: expected a JSON object"):
        list(iter_jsonl(file))


def test_unfinished_last_line_skipped(tmp_path):
    file = tmp_path / "rollouts.jsonl"
    good = json.dumps(episode("e1", [run("t", "teacher", 1)]).to_dict())
    file.write_text(f"{good}\n{good[:40]}", encoding="utf-8")
    assert [loc.where for loc in iter_jsonl(file)] == [f"{file}:1"]
    assert len(filter_episodes(iter_jsonl(file), FilterConfig()).rows) == 1

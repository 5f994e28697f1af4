"""SFT rows: TRL conversational shape, key hygiene, argument format, templates, dedupe."""

from __future__ import annotations

import json

import pytest
from filters_helpers import SYSTEM, as_dicts, conversation, episode, run

from executor_sft.agents.tools import SEARCH_TOOL
from executor_sft.filters import (
    Deduper,
    FilterConfig,
    RowError,
    canonical_key,
    filter_episodes,
    normalize_messages,
)
from tests.support import chatml_tools_template, trl_chat_template


def _one_row(messages, **cfg):
    result = filter_episodes(
        as_dicts(episode("e", [run("t", "teacher", 1, messages=messages)])), FilterConfig(**cfg)
    )
    return result


def _noisy_conversation():
    """A runtime-like conversation with extra keys and a null content, which rows must clean up."""
    msgs = conversation("Where was X born?", ["X birthplace"], "Paris", reasoning="I should search.")
    msgs[2]["content"] = None
    msgs[2]["latency_s"] = 0.3
    msgs[3]["name"] = "search"
    msgs[3]["doc_ids"] = ["d1"]
    msgs[-1]["usage"] = {"completion_tokens": 5}
    return msgs


def test_row_shape_and_contents():
    result = _one_row(_noisy_conversation())
    (row,) = result.rows
    assert set(row) == {"messages", "tools", "stratum", "source_run_id", "question_id", "dataset"}
    assert row["tools"] == [SEARCH_TOOL]
    assert (row["stratum"], row["source_run_id"], row["question_id"], row["dataset"]) == (
        "single_search",
        "t",
        "q-e",
        "hotpotqa",
    )
    system, user, call, tool, report = row["messages"]
    assert system == {"role": "system", "content": SYSTEM}
    assert user == {"role": "user", "content": "Where was X born?"}
    assert call["content"] == ""  # null content becomes "" so templates never see None
    assert call["reasoning_content"] == "I should search."
    (tc,) = call["tool_calls"]
    assert tc["type"] == "function"
    assert tc["function"] == {"name": "search", "arguments": {"query": "X birthplace"}}
    assert set(tool) == {"role", "content", "tool_call_id"} and tool["tool_call_id"] == tc["id"]
    assert tool["content"].startswith("Doc 1 (Title: X birthplace)")
    assert set(report) == {"role", "content", "reasoning_content"}
    assert "<answer>Paris</answer>" in report["content"]


def test_json_string_arguments_and_no_reasoning():
    (row,) = _one_row(_noisy_conversation(), tool_arguments="json", keep_reasoning=False).rows
    call = row["messages"][2]
    assert call["tool_calls"][0]["function"]["arguments"] == json.dumps({"query": "X birthplace"})
    assert all("reasoning_content" not in m for m in row["messages"])


def _render(row, template: str) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template([row["messages"]], tools=row["tools"], chat_template=template)
    return rendered[0]


@pytest.mark.parametrize("name", ["qwen3", "qwen3_training", "qwen3_6", "llama3_2", "project_chatml"])
def test_dict_arguments_render_through_chat_templates(name):
    template = chatml_tools_template() if name == "project_chatml" else trl_chat_template(name)
    (row,) = _one_row(_noisy_conversation()).rows
    text = _render(row, template)
    assert "X birthplace" in text.split("Doc 1")[0]  # the search query is rendered in the call
    assert "Doc 1 (Title: X birthplace) About X birthplace." in text
    assert "<answer>Paris</answer>" in text


@pytest.mark.parametrize("name", ["qwen3", "project_chatml"])
def test_dict_and_json_arguments_render_identically_where_both_are_accepted(name):
    template = chatml_tools_template() if name == "project_chatml" else trl_chat_template(name)
    texts = [
        _render(_one_row(_noisy_conversation(), tool_arguments=m).rows[0], template) for m in ("dict", "json")
    ]
    assert texts[0] == texts[1]
    assert '{"query": "X birthplace"}' in texts[0]


def test_rows_load_into_datasets():
    from datasets import Dataset

    eps = [episode(f"e{i}", [run(f"t{i}", "teacher", 1 + i % 2)]) for i in range(3)]
    eps.append(
        episode(
            "e9", [run("t9", "teacher", 2), run("b9", "teacher_budget1", 1, em=0.0, counterfactual_of="t9")]
        )
    )
    rows = filter_episodes(as_dicts(*eps), FilterConfig(teacher_single="all")).rows
    assert len(rows) == 3
    ds = Dataset.from_list(rows)
    assert ds.column_names == ["messages", "tools", "stratum", "source_run_id", "question_id", "dataset"]
    assert ds[2]["messages"][2]["tool_calls"][0]["function"]["arguments"] == {
        "query": rows[2]["messages"][2]["tool_calls"][0]["function"]["arguments"]["query"]
    }


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda m: m[:-1], "malformed_messages"),  # ends with a tool turn, no report
        (lambda m: m[:1] + m[2:], "malformed_messages"),  # no sub-query
        (lambda m: [*m[:-1], {**m[-1], "content": "  "}], "malformed_messages"),
        (lambda m: [*m[:2], {"role": "developer", "content": "x"}, *m[2:]], "malformed_messages"),
        (lambda m: [], "malformed_messages"),
    ],
)
def test_unusable_conversations_excluded(mutate, reason):
    msgs = mutate(conversation("sq", ["q"], "a"))
    result = _one_row(msgs, exclude_corrected=False)
    assert result.rows == []
    assert result.report["exclusions"] == {reason: 1}
    with pytest.raises(RowError):
        normalize_messages(msgs)


def test_duplicates_keep_first_in_file_order():
    same = dict(messages=None)
    a = run("first", "teacher", 1, **same)
    b = run(
        "second",
        "teacher",
        1,
        messages=conversation(a.sub_query, [a.searches[0].query], "answer first", call_ids="zz"),
    )
    c = run(
        "third",
        "student",
        1,
        messages=conversation(a.sub_query, [a.searches[0].query], "answer first", call_ids="yy"),
    )
    # different tool-call ids, same text: duplicates across episodes, roles and strata
    eps = [episode("e1", [a]), episode("e2", [b]), episode("e3", [c], qid="other")]
    result = filter_episodes(as_dicts(*eps))
    assert [r["source_run_id"] for r in result.rows] == ["first"]
    assert result.report["exclusions"] == {"duplicate": 2}
    kept_all = filter_episodes(as_dicts(*eps), FilterConfig(dedupe=False))
    assert [r["source_run_id"] for r in kept_all.rows] == ["first", "second", "third"]


def test_dedupe_key_rules():
    base = conversation("sq", ["q"], "a", call_ids="c")
    other_ids = conversation("sq", ["q"], "a", call_ids="d")
    assert canonical_key(base) == canonical_key(other_ids)
    spaced = json.loads(json.dumps(base))
    spaced[2]["tool_calls"][0]["function"]["arguments"] = '{ "query" :  "q" }'
    assert canonical_key(spaced) == canonical_key(base)
    as_dict_args = json.loads(json.dumps(base))
    as_dict_args[2]["tool_calls"][0]["function"]["arguments"] = {"query": "q"}
    assert canonical_key(as_dict_args) == canonical_key(base)
    extra = json.loads(json.dumps(base))
    extra[3]["doc_ids"] = ["x"]
    assert canonical_key(extra) == canonical_key(base)
    assert canonical_key(conversation("sq", ["q2"], "a", call_ids="c")) != canonical_key(base)
    assert canonical_key(conversation("sq", ["q"], "b", call_ids="c")) != canonical_key(base)
    thought = conversation("sq", ["q"], "a", reasoning="hmm", call_ids="c")
    assert canonical_key(thought) != canonical_key(base)
    assert canonical_key(thought, include_reasoning=False) == canonical_key(base)
    d = Deduper()
    assert d.add(base) and not d.add(other_ids) and len(d) == 1


def test_reasoning_counts_for_dedupe_only_when_kept():
    a = run("a", "teacher", 1, messages=conversation("sq", ["q"], "x", reasoning="think one"))
    b = run(
        "b", "teacher", 1, messages=conversation("sq", ["q"], "x", reasoning="think two"), sub_query_index=1
    )
    eps = as_dicts(episode("e", [a, b]))
    assert len(filter_episodes(eps).rows) == 2
    dropped = filter_episodes(eps, FilterConfig(keep_reasoning=False))
    assert [r["source_run_id"] for r in dropped.rows] == ["a"]
    assert dropped.report["exclusions"] == {"duplicate": 1}

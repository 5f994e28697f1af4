"""Long trajectories: passages shrink (longest first), assistant tokens never; counted."""

from __future__ import annotations

import json

import pytest
from rowgen import make_row, make_rows, trained_segments, write_jsonl

from executor_sft.sft import RowError, RowTooLongError, fit_row, read_sft_jsonl, tokenize_example
from executor_sft.sft.train import prepare_dataset


def test_long_row_is_fitted_by_shortening_passages_only(qwen3_tokenizer):
    row = make_row(5, n_searches=2, passage_words=150)
    row["messages"][3]["content"] += "\nDoc 4 (Title: Long) " + "harbour " * 600  # one very long passage
    full = tokenize_example(row, qwen3_tokenizer)
    max_length = len(full["input_ids"]) - 300
    fit = fit_row(row, qwen3_tokenizer, max_length)
    assert len(fit.example["input_ids"]) <= max_length
    assert fit.truncated_lines >= 1 and fit.removed_tokens >= 300
    # every assistant token survives, identically
    assert trained_segments(fit.example, qwen3_tokenizer) == trained_segments(full, qwen3_tokenizer)
    text = qwen3_tokenizer.decode(fit.example["input_ids"])
    assert "Doc 4 (Title: Long) harbour" in text  # headers and heads kept
    assert "[...]" not in text and text.count("harbour") < 600  # cut, and unmarked: inference has no mark
    # the longest passage was shortened first: the others are untouched
    assert fit.truncated_lines == 1
    for m in row["messages"]:
        if m["role"] == "tool":
            assert all(line in text for line in m["content"].split("\n") if not line.startswith("Doc 4"))


def test_unfittable_and_drop_policy_raise(qwen3_tokenizer):
    row = make_row(6, passage_words=60)
    n = len(tokenize_example(row, qwen3_tokenizer)["input_ids"])
    with pytest.raises(RowTooLongError):
        tokenize_example(row, qwen3_tokenizer, max_length=n - 1, overflow="drop")
    with pytest.raises(RowTooLongError, match="even with every passage"):
        tokenize_example(row, qwen3_tokenizer, max_length=300)  # system+tools header alone is ~250
    assert len(tokenize_example(row, qwen3_tokenizer, max_length=n)["input_ids"]) == n


def test_prepare_dataset_counts_kept_truncated_dropped(qwen3_tokenizer):
    rows = make_rows(4, seed=40, passage_words=20) + [make_row(50, n_searches=2, passage_words=200)]
    rows.append(make_row(51, passage_words=20))
    rows[-1]["messages"][-1]["content"] = "<answer>x</answer><evidence>" + "y " * 2000 + "</evidence>"
    lengths = [len(tokenize_example(r, qwen3_tokenizer)["input_ids"]) for r in rows[:4]]
    dataset, report = prepare_dataset(
        rows, qwen3_tokenizer, max_length=max(lengths) + 10, disable_progress=True
    )
    assert (report.rows, report.kept_whole, report.truncated, report.dropped) == (6, 4, 1, 1)
    assert report.dropped_ids == ["run-51"] and len(dataset) == 5
    assert all(len(ids) <= max(lengths) + 10 for ids in dataset["input_ids"])
    assert "1 dropped" in report.summary()


def test_every_row_dropped_is_one_user_error_that_says_what_to_raise(qwen3_tokenizer):
    """docs/sft.md's tiny-Qwen3 example at the default max_length: no ValueError from deep inside."""
    from executor_sft.errors import UserError

    with pytest.raises(UserError) as exc:
        prepare_dataset(
            make_rows(3, seed=41, passage_words=20), qwen3_tokenizer, max_length=32, disable_progress=True
        )
    message = str(exc.value)
    assert message.startswith("no trainable rows: ") and "3 dropped" in message
    assert message.endswith("raise max_length or shorten the rows") and "\n" not in message


def test_a_cut_that_sorts_the_rows_by_their_searches_is_named_with_the_length_that_avoids_it(qwen3_tokenizer):
    """Only the two-search rows overflow: the cut alone would tell a student the teacher searched
    again (bench/results/truncation_cue.md). The report says so, and the max_length that cuts none."""
    rows = [make_row(60 + i, n_searches=1 + (i % 2), passage_words=40) for i in range(12)]
    lengths = [len(tokenize_example(r, qwen3_tokenizer)["input_ids"]) for r in rows]
    one, two = max(lengths[0::2]), min(lengths[1::2])
    assert one < two
    _, report = prepare_dataset(rows, qwen3_tokenizer, max_length=one, disable_progress=True)
    assert report.by_searches == {1: [6, 0], 2: [6, 6]} and report.longest == max(lengths)
    cue = report.cue()
    assert "0 of 6 1-search rows, 6 of 6 2-search rows" in cue and cue.endswith(
        f"raise max_length to {max(lengths)} (the longest row) so that no row is cut"
    )
    _, whole = prepare_dataset(rows, qwen3_tokenizer, max_length=max(lengths), disable_progress=True)
    assert whole.truncated == 0 and whole.cue() is None
    _, few = prepare_dataset(rows[:6], qwen3_tokenizer, max_length=one, disable_progress=True)
    assert few.cue() is None  # 3 rows a class are too few to call it a cue


def test_bad_rows_name_file_line_and_field(tmp_path):
    rows = make_rows(2)
    rows[1]["messages"][2]["tool_calls"][0]["function"]["arguments"] = '{"query": '
    path = write_jsonl(tmp_path / "sft.jsonl", rows)
    with pytest.raises(
        RowError, match=r"sft.jsonl:2: field messages\[2\].tool_calls\[0\].function.arguments"
    ):
        read_sft_jsonl(path)
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}]}) + "\n")
    with pytest.raises(RowError, match="sft.jsonl:1: .*no assistant"):
        read_sft_jsonl(path)

"""Masking invariants 1-3 on real tokenised rows (real Qwen3 vocabulary, SmolLM2's tokenizer)."""

from __future__ import annotations

import copy
import json

import pytest
from rowgen import make_row, trained_segments

from executor_sft.sft import IGNORE_INDEX, render_row, tokenize_example, training_chat_template
from executor_sft.sft.templates import qwen3_training_template
from tests.support import chatml_tools_template

IM_END = 151645


def _expected_outputs(row) -> list[str]:
    """What the executor generated, written out by hand in Qwen3's hermes format."""
    out = []
    for m in row["messages"]:
        if m["role"] != "assistant":
            continue
        text = m["content"]
        for i, call in enumerate(m.get("tool_calls") or []):
            fn = call["function"]
            sep = "\n" if (text or i) else ""
            text += (
                f'{sep}<tool_call>\n{{"name": "{fn["name"]}", "arguments": {fn["arguments"]}}}\n</tool_call>'
            )
        out.append(text + "<|im_end|>")
    return out


def _token_spans(text, tokenizer):
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return enc["offset_mapping"]


def _labels_over(row, tokenizer, role, **kw):
    """Labels of every token overlapping the content of messages with `role`."""
    rendered = render_row(row["messages"], row["tools"], tokenizer, **kw)
    example = tokenize_example(row, tokenizer, **kw)
    offsets = _token_spans(rendered.text, tokenizer)
    cursor, found = 0, []
    for m in row["messages"]:
        if m["role"] != role or not m["content"]:
            continue
        start = rendered.text.index(m["content"], cursor)
        end = start + len(m["content"])
        cursor = end
        found.append(
            [lab for (s, e), lab in zip(offsets, example["labels"], strict=True) if s < end and e > start]
        )
    assert found, f"no {role} content found"
    return found


def test_tool_tokens_are_never_trained(qwen3_tokenizer, row_two_searches):
    """Invariant 1: every token of every retrieved passage has label -100."""
    for labels in _labels_over(row_two_searches, qwen3_tokenizer, "tool"):
        assert labels and all(lab == IGNORE_INDEX for lab in labels)
    segments = "".join(trained_segments(tokenize_example(row_two_searches, qwen3_tokenizer), qwen3_tokenizer))
    assert "Doc 1 (Title:" not in segments and "<tool_response>" not in segments


def test_every_generated_token_is_trained(qwen3_tokenizer, row_two_searches):
    """Invariant 2: tool-call JSON, the report and <|im_end|> are trained, exactly and only them."""
    example = tokenize_example(row_two_searches, qwen3_tokenizer)
    assert trained_segments(example, qwen3_tokenizer) == _expected_outputs(row_two_searches)
    n_assistant = sum(m["role"] == "assistant" for m in row_two_searches["messages"])
    assert sum(lab == IM_END for lab in example["labels"]) == n_assistant == 3
    assert example["labels"][-1] == IGNORE_INDEX  # the newline after the last <|im_end|> is template text
    assert example["labels"][-2] == IM_END


def test_system_and_user_tokens_are_never_trained(qwen3_tokenizer, row_two_searches):
    """Invariant 3, plus the tools header that the template adds to the system turn."""
    for role in ("system", "user"):
        for labels in _labels_over(row_two_searches, qwen3_tokenizer, role):
            assert all(lab == IGNORE_INDEX for lab in labels)
    example = tokenize_example(row_two_searches, qwen3_tokenizer)
    first_trained = next(i for i, lab in enumerate(example["labels"]) if lab != IGNORE_INDEX)
    prefix = qwen3_tokenizer.decode(example["input_ids"][:first_trained])
    assert prefix.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # empty think block is prompt
    assert '"name": "search"' in prefix  # the tool schema sits in the (untrained) system turn


def test_training_render_matches_the_inference_prompt(qwen3_tokenizer, row_two_searches):
    """Each turn's context is what Qwen3's own template shows at inference (enable_thinking=False);
    history turns differ only by their empty think block (kept so every turn is rendered alike)."""
    messages, tools = row_two_searches["messages"], row_two_searches["tools"]
    rendered = render_row(messages, tools, qwen3_tokenizer)
    assistant_idx = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for turn, (i, (start, _end)) in enumerate(zip(assistant_idx, rendered.spans, strict=True)):
        prompt = qwen3_tokenizer.apply_chat_template(
            messages[:i], tools=tools, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        context = rendered.text[:start]
        if turn == 0:
            assert context == prompt
        else:  # drop the history turns' empty think blocks
            head, tail = (
                context[: -len("<think>\n\n</think>\n\n")],
                context[-len("<think>\n\n</think>\n\n") :],
            )
            assert head.replace("<think>\n\n</think>\n\n", "") + tail == prompt


def test_tokenisation_ignores_the_tokenizers_own_template(qwen3_tokenizer, row_two_searches):
    tok = copy.deepcopy(qwen3_tokenizer)
    tok.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    assert tokenize_example(row_two_searches, tok) == tokenize_example(row_two_searches, qwen3_tokenizer)
    assert training_chat_template(tok) == qwen3_training_template()


def test_whole_text_tokenisation_equals_plain_tokenizer(qwen3_tokenizer, row_two_searches):
    """input_ids are the tokenizer's ids for the rendered text (no per-segment seams)."""
    rendered = render_row(row_two_searches["messages"], row_two_searches["tools"], qwen3_tokenizer)
    ids = qwen3_tokenizer(rendered.text, add_special_tokens=False)["input_ids"]
    assert tokenize_example(row_two_searches, qwen3_tokenizer)["input_ids"] == ids


def test_thinking_on_trains_the_think_block(qwen3_tokenizer):
    row = make_row(3)
    row["messages"][2]["reasoning_content"] = "I should look up the author first."
    off = trained_segments(tokenize_example(row, qwen3_tokenizer), qwen3_tokenizer)
    on = trained_segments(tokenize_example(row, qwen3_tokenizer, enable_thinking=True), qwen3_tokenizer)
    assert not any("<think>" in s or "look up the author" in s for s in off)
    assert on[0].startswith("<think>\nI should look up the author first.\n</think>\n\n<tool_call>")
    assert on[1].startswith("<think>\n\n</think>\n\n<answer>")


def test_smollm2_tokenizer_with_chatml_tools_template(smollm2, row_two_searches):
    _, tok = smollm2
    assert tok.chat_template == chatml_tools_template()
    example = tokenize_example(row_two_searches, tok)
    segments = trained_segments(example, tok)
    assert len(segments) == 3
    for seg, m in zip(
        segments, [m for m in row_two_searches["messages"] if m["role"] == "assistant"], strict=True
    ):
        assert seg.endswith("<|im_end|>")  # trained up to and including end-of-turn, not the newline after
        if m.get("tool_calls"):
            assert json.loads(m["tool_calls"][0]["function"]["arguments"])["query"] in seg
        else:
            assert m["content"] in seg
    joined = "".join(segments)
    assert "Doc 1 (Title:" not in joined and row_two_searches["messages"][1]["content"] not in joined


def test_tokenizer_without_markers_is_refused(smollm2, row_two_searches):
    _, tok = smollm2
    tok = copy.deepcopy(tok)
    tok.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with pytest.raises(ValueError, match="generation"):
        tokenize_example(row_two_searches, tok)


@pytest.mark.slow
def test_the_trainer_tokenises_exactly_as_tokenize_example(sft_rows, qwen3_tokenizer):
    """`prepare_dataset` (what the trainer trains on) gives the masks `tokenize_example` gives,
    long rows included (a short max_length makes passages shorten)."""
    from executor_sft.sft.length import RowTooLongError
    from executor_sft.sft.train import prepare_dataset

    max_length, min_passage = 400, 16
    dataset, report = prepare_dataset(
        sft_rows, qwen3_tokenizer, max_length, min_passage_tokens=min_passage, disable_progress=True
    )
    expected = []
    for row in sft_rows:
        try:
            expected.append(
                tokenize_example(row, qwen3_tokenizer, max_length, min_passage_tokens=min_passage)
            )
        except RowTooLongError:
            continue
    assert report.truncated > 0
    assert dataset["input_ids"] == [e["input_ids"] for e in expected]
    assert dataset["labels"] == [e["labels"] for e in expected]

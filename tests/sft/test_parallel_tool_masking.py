"""SFT rows of runs with parallel tool calls (real Qwen3 tokenizer): every tool result of a turn
is masked, both calls are trained, and each turn's prompt is still the trained prefix."""

from __future__ import annotations

import asyncio

import pytest
from rowgen import trained_segments

from executor_sft.agents import run_executor
from executor_sft.filters.rows import to_sft_row
from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.sft import tokenize_example
from executor_sft.sft.render import render_row, tokenize_rendered
from executor_sft.sft.templates import inference_chat_template
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

REPORT = "<answer>Tarsin</answer><evidence>Ada Krell was born in Tarsin.</evidence>"


class FixedRetriever(Retriever):
    index_id = "fixed"

    def search(self, queries, k):
        return [
            [Hit(f"{q}-{i}", f"T{i}", f"PASSAGE {i} ABOUT {q.upper()}", 1.0) for i in range(k)]
            for q in queries
        ]


def _row(thinking: bool = False):
    reasoning = "Two independent facts: search both at once." if thinking else None
    calls = [
        tool_call("search", {"query": "velmora founder"}, "c1"),
        tool_call("search", {"query": "krell birth"}, "c2"),
    ]
    model = ScriptedChatModel([assistant(tool_calls=calls, reasoning=reasoning), assistant(REPORT)])
    run = asyncio.run(run_executor(model, FixedRetriever(), "Where was Velmora's founder born?", max_turns=3))
    assert run.finish == "report" and run.n_searches == 2 and run.n_corrections == 0
    row = to_sft_row(run.messages, stratum="s", source_run_id="r", question_id="q", dataset="d")
    return model.requests, row


def test_both_tool_results_are_masked_and_both_calls_trained(qwen3_tokenizer):
    _, row = _row()
    assert [m["role"] for m in row["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
    ]
    example = tokenize_example(row, qwen3_tokenizer)
    text = qwen3_tokenizer.decode(example["input_ids"])
    trained = "".join(trained_segments(example, qwen3_tokenizer))
    for query in ("VELMORA FOUNDER", "KRELL BIRTH"):
        assert f"PASSAGE 0 ABOUT {query}" in text  # the tool result is in the row ...
        assert "PASSAGE" not in trained and query not in trained  # ... and none of it carries loss
    # Every token inside each <tool_response> block is -100.
    labels_by_char = _label_per_char(example, qwen3_tokenizer)
    responses = _spans(text, "<tool_response>", "</tool_response>")
    assert len(responses) == 2
    for start, end in responses:
        assert not any(labels_by_char[start:end]), "a tool result token is trained"
    # Both tool calls (and the report) are what the executor wrote: trained.
    assert trained.count("<tool_call>") == 2
    assert (
        '"velmora founder"' in trained and '"krell birth"' in trained and "<answer>Tarsin</answer>" in trained
    )


def _label_per_char(example, tokenizer) -> list[bool]:
    """Whether the token covering each character of the decoded text is trained."""
    flags: list[bool] = []
    for tok, lab in zip(example["input_ids"], example["labels"], strict=True):
        flags.extend([lab != -100] * len(tokenizer.decode([tok])))
    return flags


def _spans(text: str, open_tag: str, close_tag: str) -> list[tuple[int, int]]:
    spans, at = [], 0
    while (start := text.find(open_tag, at)) >= 0:
        end = text.index(close_tag, start) + len(close_tag)
        spans.append((start, end))
        at = end
    return spans


@pytest.mark.parametrize("thinking", [False, True], ids=["no-think", "think"])
def test_each_turn_prompt_is_the_trained_prefix_with_parallel_calls(qwen3_tokenizer, thinking):
    tok = qwen3_tokenizer
    requests, row = _row(thinking)
    trained = tokenize_rendered(render_row(row["messages"], row["tools"], tok, enable_thinking=thinking), tok)
    ids, labels = trained["input_ids"], trained["labels"]
    starts = [i for i in range(len(ids)) if labels[i] != -100 and (i == 0 or labels[i - 1] == -100)]
    assert len(requests) == len(starts) == 2
    for request, start in zip(requests, starts, strict=True):
        prompt = tok.apply_chat_template(
            request["messages"], tools=request["tools"], add_generation_prompt=True, enable_thinking=thinking,
            chat_template=inference_chat_template(tok), tokenize=False,
        )  # fmt: skip
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        assert ids[: len(prompt_ids)] == prompt_ids and start == len(prompt_ids)

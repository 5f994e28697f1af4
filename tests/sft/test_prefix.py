"""One prefix: what an executor is prompted with at each turn is exactly the prefix that turn is
trained under in its SFT row (real Qwen3 tokenizer, native and tag protocols, thinking off/on)."""

from __future__ import annotations

import asyncio
import re

import pytest

from executor_sft.agents import run_executor
from executor_sft.filters.rows import to_sft_row
from executor_sft.llm.offline import qwen3_executor_template
from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.sft.render import render_row, tokenize_rendered
from executor_sft.sft.templates import inference_chat_template, qwen3_training_template
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

REPORT = "<answer>1919</answer><evidence>Thiges Dosolbror was born in 1919.</evidence>"


class FixedRetriever(Retriever):
    index_id = "fixed"

    def search(self, queries, k):
        return [
            [Hit(f"d{i}", f"Title {i}", f"Passage {i} about {q}.", 1.0) for i in range(k)] for q in queries
        ]


def _replies(protocol: str, thinking: bool) -> list[dict]:
    reasoning = (lambda i: f"Step {i}: I should look this up.") if thinking else (lambda i: None)
    if protocol == "tag":
        return [
            assistant("<search>Thiges Dosolbror</search>", reasoning=reasoning(1)),
            assistant("<search>Thiges Dosolbror entrepreneur born</search>", reasoning=reasoning(2)),
            assistant(REPORT, reasoning=reasoning(3)),
        ]
    return [
        assistant(
            tool_calls=[tool_call("search", {"query": "Thiges Dosolbror"}, "c1")], reasoning=reasoning(1)
        ),
        assistant(
            tool_calls=[tool_call("search", {"query": "Thiges Dosolbror entrepreneur"}, "c2")],
            reasoning=reasoning(2),
        ),
        assistant(REPORT, reasoning=reasoning(3)),
    ]


def _collect(protocol: str, thinking: bool):
    model = ScriptedChatModel(_replies(protocol, thinking))
    run = asyncio.run(
        run_executor(
            model, FixedRetriever(), "In what year was Thiges Dosolbror born?", protocol=protocol, max_turns=3
        )
    )
    assert run.finish == "report" and run.n_searches == 2
    row = to_sft_row(run.messages, stratum="s", source_run_id="r", question_id="q", dataset="d")
    return model.requests, row


@pytest.mark.parametrize("thinking", [False, True], ids=["no-think", "think"])
@pytest.mark.parametrize("protocol", ["native", "tag"])
def test_every_turn_prompt_is_the_trained_prefix(qwen3_tokenizer, protocol, thinking):
    tok = qwen3_tokenizer
    requests, row = _collect(protocol, thinking)
    rendered = render_row(
        row["messages"], row["tools"] if protocol == "native" else None, tok, enable_thinking=thinking
    )
    trained = tokenize_rendered(rendered, tok)
    ids, labels = trained["input_ids"], trained["labels"]
    starts = [i for i in range(len(ids)) if labels[i] != -100 and (i == 0 or labels[i - 1] == -100)]
    assert len(requests) == len(starts) == 3
    for turn, (request, start) in enumerate(zip(requests, starts, strict=True)):
        prompt = tok.apply_chat_template(
            request["messages"],
            tools=request["tools"],
            add_generation_prompt=True,
            enable_thinking=thinking,
            chat_template=inference_chat_template(tok),
            tokenize=False,
        )
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        assert ids[: len(prompt_ids)] == prompt_ids, (
            f"turn {turn}: inference prompt is not the trained prefix"
        )
        assert start == len(prompt_ids), (
            f"turn {turn}: training starts at {start}, the prompt ends at {len(prompt_ids)}"
        )
        if protocol == "native":
            assert request["tools"], f"turn {turn}: the tool is offered on every turn"


def test_the_inference_template_is_the_training_template_without_markers():
    stripped = re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", qwen3_training_template())
    served = qwen3_executor_template()
    assert served.split("-#}", 1)[1] == stripped.split("-#}", 1)[1]


def test_token_cost_of_keeping_empty_think_blocks(qwen3_tokenizer):
    """What the one-prefix template costs against Qwen3's own at the last turn of a two-search run."""
    from executor_sft.llm.offline import trl_chat_template

    requests, _ = _collect("native", thinking=False)
    last = requests[-1]
    counts = {
        name: len(
            qwen3_tokenizer(
                qwen3_tokenizer.apply_chat_template(
                    last["messages"], tools=last["tools"], add_generation_prompt=True, enable_thinking=False,
                    chat_template=template, tokenize=False,
                ),
                add_special_tokens=False,
            )["input_ids"]
        )
        for name, template in (("qwen3", trl_chat_template("qwen3")), ("executor", qwen3_executor_template()))
    }  # fmt: skip
    print(f"last-turn prompt tokens: {counts}")
    assert counts["executor"] - counts["qwen3"] == 2 * 4  # two history turns x '<think>\n\n</think>\n\n'


def test_qwen3s_own_template_would_break_the_prefix(qwen3_tokenizer):
    """The reason for the executor template: Qwen3's own drops history think blocks."""
    from executor_sft.llm.offline import trl_chat_template

    requests, row = _collect("native", thinking=False)
    ids = tokenize_rendered(render_row(row["messages"], row["tools"], qwen3_tokenizer), qwen3_tokenizer)[
        "input_ids"
    ]
    second = requests[1]
    prompt = qwen3_tokenizer.apply_chat_template(
        second["messages"], tools=second["tools"], add_generation_prompt=True, enable_thinking=False,
        chat_template=trl_chat_template("qwen3"), tokenize=False,
    )  # fmt: skip
    prompt_ids = qwen3_tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert ids[: len(prompt_ids)] != prompt_ids

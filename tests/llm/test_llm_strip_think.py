"""`strip_think`: the one way parsers (executor replies, reports, judge verdicts) drop thoughts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_sft.llm.parsing import strip_think
from executor_sft.metrics.judge import parse_verdict

CASES = [
    (None, ""),
    ("", ""),
    ("  plain answer \n", "plain answer"),
    ("<think>plan</think> answer", "answer"),
    ("<THINK>plan</Think>answer", "answer"),
    ("a <think>one</think> b <think>two</think> c", "a  b  c"),
    ("plan prefilled by the template</think>\nanswer", "answer"),
    ("visible <think>cut off by max_tokens", "visible"),
    ("<think>only thinking", ""),
    ("<think>a<think>b</think>c</think>d", "d"),
    ("a</think>b</think>c", "c"),
    ("x</think>y<think>z", "y"),
    ("<answer>A</answer>", "<answer>A</answer>"),
]


@pytest.mark.parametrize(("text", "visible"), CASES)
def test_strip_think_table(text: str | None, visible: str) -> None:
    assert strip_think(text) == visible


no_tags = st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=40)


@given(no_tags, no_tags, no_tags)
def test_a_thought_anywhere_never_reaches_the_visible_text(before: str, thought: str, after: str) -> None:
    assert strip_think(f"{before}<think>{thought}</think>{after}") == (before + after).strip()
    assert strip_think(f"{thought}</think>{after}") == after.strip()
    assert strip_think(f"{before}<think>{thought}") == before.strip()
    assert strip_think(before) == before.strip()


def test_the_judge_reads_the_verdict_after_the_thought() -> None:
    assert parse_verdict("<think>maybe false?</think> True") is True
    assert parse_verdict("false, no, wrong</think>\n**Verdict:** correct") is True
    assert parse_verdict("<think>True") is None

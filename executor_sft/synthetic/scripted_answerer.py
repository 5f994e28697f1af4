"""A scripted answerer for the synthetic world: a data source for the demo and the tests.

It is NOT a stand-in for the LLM path. It composes the final answer from the reports only
(as the real answerer must): a bridge question takes the last hop's reported answer; a
comparison compares the two reported values and names the winner. So with scripted roles an
episode is right or wrong exactly as the executors' reports are.
"""

from __future__ import annotations

import re
from typing import Any

from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.schema import Message
from executor_sft.synthetic._chat import answers_after, answers_in, first_user, result
from executor_sft.synthetic.scripted_backbone import find_question
from executor_sft.synthetic.world import World

_NUMBER = re.compile(r"\d[\d,]*")
_SUBQUERY_LINE = re.compile(r"Sub-query:\s*(.+)")


def _number(text: str | None) -> int | None:
    m = _NUMBER.search(text or "")
    return int(m.group(0).replace(",", "")) if m else None


class ScriptedAnswerer:
    """Scripted answerer policy (a `ChatModel`): replies `<answer>...</answer>` from the findings."""

    def __init__(self, world: World, name: str = "scripted-answerer"):
        self.world = world
        self.name = name

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        return result(
            {"role": "assistant", "content": f"<answer>{self.answer(messages)}</answer>"}, messages, self.name
        )

    def answer(self, messages: list[Message]) -> str:
        text = first_user(messages)
        question = find_question(self.world, text)
        if question is not None and question.type == "comparison" and question.compare:
            return self._compare(text, question.compare)
        found = answers_in(text)
        return found[-1] if found else "unknown"

    def _compare(self, text: str, compare: dict[str, Any]) -> str:
        """Name the candidate whose reported value wins; the first candidate when a value is missing."""
        candidates: list[str] = compare["candidates"]
        # Each finding's sub-query names one candidate; pair candidates with reports by that.
        sub_queries = [m.group(1).strip() for m in _SUBQUERY_LINE.finditer(text)]
        values: dict[str, int | None] = {}
        for sub_query, answer in zip(sub_queries, answers_after(text, sub_queries), strict=True):
            for c in candidates:
                if c not in values and re.search(rf"(?<!\w){re.escape(c)}(?!\w)", sub_query):
                    values[c] = _number(answer)
        a, b = (values.get(c) for c in candidates)
        if a is None or b is None:
            return candidates[0] if b is None else candidates[1]
        pick = min if compare["pick"] == "min" else max
        return candidates[0] if pick(a, b) == a else candidates[1]

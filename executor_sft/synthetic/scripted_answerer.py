"""A scripted answerer for the synthetic world: a data source for the demo and the tests.

It is NOT a stand-in for the LLM path. It composes the final answer from the reports only
(as the real answerer must): a bridge question follows the chain of findings (each hop must
be about the entity the previous report named) and takes the last hop's answer; a
comparison compares the two reported values and names the winner; a wide task's table lists
the entities the listing report named, each cell from the report about it (empty when none
came back). So with scripted roles an episode is right or wrong exactly as the executors'
reports are.
"""

from __future__ import annotations

import re
from typing import Any

from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.metrics.answer import normalize_answer
from executor_sft.metrics.table import render_markdown_table
from executor_sft.schema import Message
from executor_sft.synthetic._chat import answers_after, answers_in, first_user, result
from executor_sft.synthetic.relations import parse_subquery
from executor_sft.synthetic.scripted_backbone import find_question
from executor_sft.synthetic.world import WIDE_COLUMNS, World

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
        answer = self.answer(messages)
        if "\n" in answer:  # a table keeps its lines
            answer = f"\n{answer}\n"
        return result({"role": "assistant", "content": f"<answer>{answer}</answer>"}, messages, self.name)

    def answer(self, messages: list[Message]) -> str:
        text = first_user(messages)
        question = find_question(self.world, text)
        if question is not None and question.type == "comparison" and question.compare:
            return self._compare(text, question.compare)
        if question is not None and question.type == "bridge":
            return self._follow_chain(text)
        if question is not None and question.type == "wide":
            return self._table(text)
        found = answers_in(text)
        return found[-1] if found else "unknown"

    def _findings(self, text: str) -> list[tuple[str, str | None]]:
        sub_queries = [m.group(1).strip() for m in _SUBQUERY_LINE.finditer(text)]
        return list(zip(sub_queries, answers_after(text, sub_queries), strict=True))

    def _follow_chain(self, text: str) -> str:
        """Follow the findings hop by hop; a hop about another entity than the previous answer breaks it.

        With a broken chain the findings do not connect, so the answer is the last one that
        does (a best guess of the wrong kind, hence wrong): a report's error is never masked
        by later reports that were researched from a different answer.
        """
        current: str | None = None
        for sub_query, answer in self._findings(text):
            parsed = parse_subquery(sub_query, self.world.types_of)
            if current is not None and (
                parsed is None or normalize_answer(parsed.name) != normalize_answer(current)
            ):
                break
            if not answer:
                break
            current = answer
        return current or "unknown"

    def _table(self, text: str) -> str:
        """The table of every listed entity; a cell is the report about that entity and column."""
        names: list[str] = []
        cells: dict[tuple[str, str], str] = {}
        for sub_query, answer in self._findings(text):
            parsed = parse_subquery(sub_query, self.world.types_of)
            if parsed is None or not answer or answer.strip().lower() == "unknown":
                continue
            if parsed.relation.key == "cities":
                names = names or [n.strip() for n in answer.split(",") if n.strip()]
            else:
                cells[(parsed.name.lower(), parsed.relation.key)] = answer.strip()
        rows = [[n, *(cells.get((n.lower(), rkey), "") for _, rkey in WIDE_COLUMNS[1:])] for n in names]
        return render_markdown_table([column for column, _ in WIDE_COLUMNS], rows)

    def _compare(self, text: str, compare: dict[str, Any]) -> str:
        """Name the candidate whose reported value wins ("unknown" when a value is missing)."""
        candidates: list[str] = compare["candidates"]
        # Each finding's sub-query names one candidate; pair candidates with reports by that.
        values: dict[str, int | None] = {}
        for sub_query, answer in self._findings(text):
            for c in candidates:
                if c not in values and re.search(rf"(?<!\w){re.escape(c)}(?!\w)", sub_query):
                    values[c] = _number(answer)
        a, b = (values.get(c) for c in candidates)
        if a is None or b is None:
            return "unknown"
        pick = min if compare["pick"] == "min" else max
        return candidates[0] if pick(a, b) == a else candidates[1]


def world_answerer(world: str) -> ScriptedAnswerer:
    """The scripted answerer of a world directory written by `write_world` (e.g. the sample data's
    `data/world`), for configs that name a factory: `answerer: {factory: ...:world_answerer, world: DIR}`."""
    from executor_sft.synthetic.world import load_world

    return ScriptedAnswerer(load_world(world))

"""A scripted backbone for the synthetic world: a data source for the demo and the tests.

It is NOT a stand-in for the LLM path. It knows each question's decomposition and plays it
out through the real protocol (docs/protocols.md): bridge questions one hop per round, with
the entity filled in from the driver executor's `<answer>` in the round feedback (so a wrong
report propagates, as it would with a real backbone); comparison questions as parallel
sub-queries in one round; wide tasks (docs/wide.md) as one sub-query that lists the entities,
then one sub-query per (entity, column) fanned out P at a time (P read from its system prompt),
entity by entity; then `<stop/>`.
"""

from __future__ import annotations

import re

from executor_sft.schema import Message, content_text
from executor_sft.synthetic._chat import TextReplyModel, answers_after, first_user
from executor_sft.synthetic.relations import RELATIONS, render_subject
from executor_sft.synthetic.world import WIDE_COLUMNS, Hop, World, WorldQuestion

STOP = "<stop/>"
_NO_ANSWER = {"", "unknown"}
_WIDTH = re.compile(r"between 1 and (\d+) sub-queries")
_DISPATCHED = re.compile(r"Sub-query:\s*(.+)")


def find_question(world: World, text: str) -> WorldQuestion | None:
    """The world question quoted in `text` (the longest one, if several match)."""
    found = [q for q in world.questions if q.question in text]
    return max(found, key=lambda q: len(q.question)) if found else None


def bridge_subquery(hop: Hop, subject_name: str) -> str:
    """A bridge hop's sub-query with the subject filled in from the previous hop's report."""
    rel = RELATIONS[hop.relation]
    return rel.question.format(s=render_subject(rel.subject, subject_name, hop.descriptor))


class ScriptedBackbone(TextReplyModel):
    """Scripted backbone policy (a `ChatModel`) that dispatches the world's decompositions."""

    def __init__(self, world: World, name: str = "scripted-backbone"):
        self.world = world
        self.name = name

    def reply(self, messages: list[Message]) -> str:
        question = find_question(self.world, first_user(messages))
        if question is None:
            return STOP
        rounds = [m for m in messages if m.get("role") == "assistant"]
        done = len(rounds)
        hops = question.decomposition
        if question.type == "wide":
            return self._wide(question, messages, done)
        if question.type == "comparison" or all(h.depends_on is None for h in hops):
            return STOP if done else _dispatch([h.question for h in hops])
        if done >= len(hops):
            return STOP
        if done == 0:
            return _dispatch([hops[0].question])
        # The feedback for the previous round is the last user message; read the answer to
        # the sub-query this backbone dispatched last.
        feedback = content_text(next(m for m in reversed(messages) if m.get("role") == "user").get("content"))
        dispatched = _subqueries(content_text(rounds[-1].get("content")))
        answers = answers_after(feedback, dispatched) if dispatched else []
        answer = (answers[-1] if answers else None) or ""
        if answer.strip().lower() in _NO_ANSWER:
            return STOP
        return _dispatch([bridge_subquery(hops[done], answer.strip())])

    def _wide(self, question: WorldQuestion, messages: list[Message], done: int) -> str:
        """Round 0 asks for the entity list; later rounds fan out the cells no report has covered yet."""
        listing = question.decomposition[0]
        if done == 0:
            return _dispatch([listing.question])
        feedback = [content_text(m.get("content")) for m in messages[2:] if m.get("role") == "user"]
        found = answers_after(feedback[0], [listing.question]) if feedback else []
        names = [n.strip() for n in (found[0] or "").split(",")] if found else []
        names = [n for n in names if n.lower() not in _NO_ANSWER]
        if not names:
            return STOP
        covered = {q.strip() for text in feedback for q in _DISPATCHED.findall(text)}
        pending = [
            RELATIONS[rkey].question.format(s=render_subject("city", name, listing.subject))
            for name in names
            for _, rkey in WIDE_COLUMNS[1:]
        ]
        pending = [q for q in pending if q not in covered]
        if not pending:
            return STOP
        width = _WIDTH.search(content_text(messages[0].get("content"))) if messages else None
        return _dispatch(pending[: int(width.group(1))] if width else pending)


def _dispatch(sub_queries: list[str]) -> str:
    return "\n".join(f"<subquery>{q}</subquery>" for q in sub_queries)


def _subqueries(text: str) -> list[str]:
    return [q.strip() for q in re.findall(r"<subquery>(.*?)</subquery>", text, re.S)]

"""A scripted executor for the synthetic world: a data source for the demo and the tests.

It is NOT a stand-in for the LLM path. It exists so the whole pipeline (collection,
counterfactual re-runs, filters, SFT rows) can run offline with behaviour we know:
it searches `name + relation keywords`; if the passage of the entity the sub-query means is
among the results it reports the fact; otherwise (a namesake crowded it out) it searches
again with the disambiguating attribute (`name + occupation/country + keywords`). When the
search budget is spent it reports its best guess from what it has read, which for an
ambiguous name is the wrong namesake's fact. So a `max_searches=1` re-run fails exactly on
the sub-queries that needed the second search.

Speaks both executor protocols of docs/protocols.md: native tool calls when the request
offers tools, `<search>` / `<information>` tags otherwise.
"""

from __future__ import annotations

import json
import re
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from executor_sft.agents.tools import SEARCH_TOOL_NAME
from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.llm.parsing import parse_tool_call
from executor_sft.schema import Message, content_text
from executor_sft.synthetic._chat import (
    SeenPassage,
    first_user,
    info_blocks,
    outside_info,
    parse_passages,
    result,
    unit_draw,
)
from executor_sft.synthetic.relations import ParsedSubQuery, parse_subquery
from executor_sft.synthetic.world import Entity, World

_SEARCH_TAG = re.compile(r"<search>(.*?)</search>", re.S)
_BUDGET = re.compile(r"search at most (\d+) time")


@dataclass
class _State:
    sub_query: str
    parsed: ParsedSubQuery | None
    queries: list[str]
    passages: list[SeenPassage]
    protocol: str
    can_search: bool


@dataclass
class _History:
    """What the conversation so far holds: the queries searched, the passages seen, and how."""

    queries: list[str] = field(default_factory=list)
    passages: list[SeenPassage] = field(default_factory=list)
    saw_tool: bool = False
    saw_info: bool = False

    @classmethod
    def read(cls, messages: list[Message]) -> _History:
        h = cls()
        for m in messages:
            role, text = m.get("role"), content_text(m.get("content"))
            if role == "assistant":
                for call in m.get("tool_calls") or []:
                    parsed = parse_tool_call(call)
                    args = parsed.arguments if parsed else None
                    h.queries.append(str(args.get("query", "")) if isinstance(args, dict) else "")
                h.queries += [q.strip() for q in _SEARCH_TAG.findall(text)]
            elif role == "tool":
                h.saw_tool = True
                h.passages += parse_passages(text)
            elif role == "user":
                for block in info_blocks(text):
                    h.saw_info = True
                    h.passages += parse_passages(block)
        return h


def _protocol(
    messages: list[Message], tools: list[dict[str, Any]] | None, system: str, history: _History
) -> tuple[str, bool]:
    """The protocol the conversation uses ("native" or "tag") and whether this turn may search."""
    offered = any((t.get("function") or {}).get("name") == SEARCH_TOOL_NAME for t in tools or [])
    last = messages[-1] if messages else {}
    if offered or history.saw_tool:
        # A user message after a tool result is the runtime asking for the report.
        return "native", offered and not (history.saw_tool and last.get("role") == "user")
    if history.saw_info or "<search>" in system:
        if last.get("role") == "user" and info_blocks(content_text(last.get("content"))):
            return "tag", not outside_info(content_text(last.get("content")))
        return "tag", not history.saw_info
    return "native", False


@dataclass(eq=False)
class ScriptedTeacherExecutor:
    """Scripted executor policy (a `ChatModel`) that reads the world's passages like a careful teacher.

    - `reformulate=False` never searches a second time (like an untuned small executor).
    - `noise`: share of sub-queries (drawn reproducibly from `seed` and the sub-query) whose
      report names a wrong answer.
    - `extra_search_rate`: share of sub-queries where it searches a second time even though
      the first search already had the answer (the budget-1 re-run then succeeds): a coin that
      ignores the passages.
    - `double_check`: it also searches a second time when the first results hold the passage it
      wants but not first (Doc 1 is someone else): a cautious reader's needless search, decided
      by the passages (the decoupled world's teacher, docs/synthetic.md).
    """

    world: World
    name: str = "scripted-teacher"
    _: KW_ONLY
    reformulate: bool = True
    noise: float = 0.0
    extra_search_rate: float = 0.0
    double_check: bool = False
    seed: int = 0
    calls: int = field(default=0, init=False)

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        self.calls += 1
        return result(self.reply(messages, tools), messages, self.name)

    # --- reading the conversation --------------------------------------------------------
    def _state(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> _State:
        sub_query = first_user(messages)
        history = _History.read(messages)
        system = next((content_text(m.get("content")) for m in messages if m.get("role") == "system"), "")
        protocol, can_search = _protocol(messages, tools, system, history)
        budget = _BUDGET.search(system)
        if budget is not None and len(history.queries) >= int(budget.group(1)):
            can_search = False  # the instructions' search budget is spent
        parsed = parse_subquery(sub_query, self.world.types_of)
        return _State(sub_query, parsed, history.queries, history.passages, protocol, can_search)

    # --- policy ------------------------------------------------------------------------------
    def _plan(self, parsed: ParsedSubQuery | None, sub_query: str) -> list[str]:
        """The queries it would try, in order: bare name, name + descriptor, the sub-query itself."""
        if parsed is None:
            return [sub_query.strip().rstrip("?")]
        rel = parsed.relation
        plan = [f"{parsed.name} {rel.keywords}"]
        if parsed.descriptor:
            plan.append(f"{parsed.name} {parsed.descriptor} {rel.keywords}")
        plan.append(parsed.text.rstrip("?"))
        return list(dict.fromkeys(plan))

    def queries(self, sub_query: str) -> list[str]:
        """The searches it would try for `sub_query`, in order (the first is always made)."""
        return self._plan(parse_subquery(sub_query, self.world.types_of), sub_query)

    def _target(self, parsed: ParsedSubQuery) -> Entity | None:
        return self.world.resolve(parsed.relation.subject, parsed.name, parsed.descriptor)

    def _read(self, state: _State) -> tuple[Entity | None, Entity | None]:
        """(the entity the sub-query means, if read; else the first same-named one read)."""
        parsed = state.parsed
        if parsed is None:
            return None, None
        target = self._target(parsed)
        guess = None
        for p in state.passages:
            e = self.world.entity_of_passage(p.title, p.text)
            if e is None or e.type != parsed.relation.subject or e.name.lower() != parsed.name.lower():
                continue
            if target is None or e.id == target.id:
                return e, e
            guess = guess or e
        return None, guess

    def reply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> Message:
        """The next assistant message for this conversation (pure function of the request)."""
        state = self._state(messages, tools)
        found, guess = self._read(state)
        plan = self._plan(state.parsed, state.sub_query)
        if not self.reformulate:
            plan = plan[:1]
        extra = unit_draw(self.seed, "extra", state.sub_query) < self.extra_search_rate
        if self.double_check and found is not None and state.passages:
            first = self.world.entity_of_passage(state.passages[0].title, state.passages[0].text)
            extra = extra or first is None or first.id != found.id
        if extra and found is not None and state.can_search and len(state.queries) == 1 and plan[1:]:
            return self._search(state, plan[1])
        if found is None and state.can_search:
            nxt = next((q for q in plan if q not in state.queries), None)
            if nxt is not None:
                return self._search(state, nxt)
        return self._report(state, found or guess)

    def _search(self, state: _State, query: str) -> Message:
        if state.protocol == "tag":
            return {"role": "assistant", "content": f"<search>{query}</search>"}
        call = {
            "id": f"call_{len(state.queries)}",
            "type": "function",
            "function": {"name": SEARCH_TOOL_NAME, "arguments": json.dumps({"query": query})},
        }
        return {"role": "assistant", "content": "", "tool_calls": [call]}

    def _report(self, state: _State, entity: Entity | None) -> Message:
        parsed = state.parsed
        if parsed is None or entity is None:
            missing = "the passages do not mention the entity the question is about"
            return {
                "role": "assistant",
                "content": f"<answer>unknown</answer>\n<evidence>{missing}</evidence>",
            }
        rel = parsed.relation.key
        answer, evidence = self.world.value(entity, rel), self.world.evidence(entity, rel)
        if unit_draw(self.seed, "noise", state.sub_query) < self.noise:
            answer = self._wrong_answer(entity, rel, state.sub_query)
        return {"role": "assistant", "content": f"<answer>{answer}</answer>\n<evidence>{evidence}</evidence>"}

    def _wrong_answer(self, entity: Entity, relation: str, sub_query: str) -> str:
        """A plausible but wrong answer: the same relation of another entity of the same type."""
        others = [
            e
            for e in self.world.entities
            if e.type == entity.type
            and self.world.has_fact(e, relation)
            and self.world.value(e, relation) != self.world.value(entity, relation)
        ]
        pick = others[int(unit_draw(self.seed, "wrong", sub_query) * len(others))]
        return self.world.value(pick, relation)


def scripted_student_executor(
    world: World, name: str = "scripted-student", **kwargs: Any
) -> ScriptedTeacherExecutor:
    """The same reader without reformulation: searches once and reports (a weak-executor data source)."""
    return ScriptedTeacherExecutor(world, name, reformulate=False, **kwargs)

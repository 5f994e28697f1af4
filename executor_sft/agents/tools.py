"""The executor's tools: `TOOLS`, one table of name -> `Tool` (docs/architecture.md, "Extending").

A tool is a name, the OpenAI function schema the model is offered (also written into SFT
rows), and an async `run(arguments, context) -> str` whose text answers the call. The
executor's config lists the tools by registered name or `package.module:attr`; the runtime
offers all of them on every turn and dispatches each call by name. The built-in `search`
registers here the same way a user's tool does, as do its alternatives: `search_many` (the
search-agent blog's `search(queries)`, several queries in one call) and `open_document`, the
access tool (WideSeek-R1's "access"): with it offered, search shows snippets with ids.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from executor_sft.agents.executor_text import (
    OPEN_DOCUMENT_DESCRIPTION,
    OPEN_DOCUMENT_ID_DESCRIPTION,
    SEARCH_DESCRIPTION,
    SEARCH_MANY_DESCRIPTION,
    SEARCH_MANY_QUERIES_DESCRIPTION,
    SEARCH_QUERY_DESCRIPTION,
    document_result,
    multi_search_result,
    search_result,
)
from executor_sft.errors import ConfigError
from executor_sft.registry import Registry
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import SearchRecord

SEARCH_TOOL_NAME = "search"
MAX_QUERY_CHARS = 1_000
"""A query longer than this gets a correction instead of a search (queries are a few words; a
model that writes kilobytes into one is looping, and a retrieval server may refuse the body)."""
MAX_DOC_ID_CHARS = 256
"""A document id longer than this gets a correction instead of a lookup, never an echo of it."""


class ToolArgumentError(ValueError):
    """Raised by a tool's `run` for arguments the model got wrong: the message goes back to the
    model as the correction's problem (one correction per run, as for any malformed reply)."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool call can use: the run's retriever, its passages per search, its search log."""

    retriever: Retriever
    top_k: int
    searches: list[SearchRecord]
    """The run's `ExecutorRun.searches`; a tool that searches appends here (the search budget
    and `n_searches` count these; one record per query)."""
    search_budget: int | None = None
    """How many searches this call may make (the executor reserves them before calls run
    concurrently; None: no cap besides the run's)."""
    snippet_chars: int | None = None
    """Set when the access tool is offered: search shows snippets of this length with ids."""


ToolRun = Callable[[Mapping[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object (`{"type": "object", "properties": ..., "required": ...}`)."""
    run: ToolRun
    failure: str | None = None
    """How an exception `run` raises is recorded in `ExecutorRun.error` (None: `tool <name>`); the
    run then ends with finish "error"."""
    search_cost: Callable[[Mapping[str, Any]], int] | None = None
    """How many searches a call with these arguments asks for (None: it does not search): the
    executor reserves that many from the budget, in call order, before a turn's calls run."""
    schema: dict[str, Any] = field(init=False, repr=False, compare=False)
    """The OpenAI function schema the model sees."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"tool name {self.name!r}: use letters, digits, '_' or '-'")
        schema = {"name": self.name, "description": self.description, "parameters": self.parameters}
        object.__setattr__(self, "schema", {"type": "function", "function": schema})

    @property
    def example(self) -> str:
        """The arguments' shape as a correction shows it, e.g. `{"query": "..."}`."""
        properties = self.parameters.get("properties", {})

        def value(key: str) -> str:
            return '["..."]' if properties.get(key, {}).get("type") == "array" else '"..."'

        return "{" + ", ".join(f'"{k}": {value(k)}' for k in self.parameters.get("required", [])) + "}"

    @property
    def failure_label(self) -> str:
        return self.failure or f"tool {self.name}"


TOOLS: Registry[Tool] = Registry("executor tool")


async def _recorded_search(queries: list[str], context: ToolContext) -> list:
    """Search `queries` as one batch and record each as a search, timed by the batch's wall time."""
    start = time.perf_counter()
    results = await context.retriever.asearch(queries, context.top_k)
    latency = time.perf_counter() - start
    retriever = getattr(context.retriever, "index_id", None)
    for query, hits in zip(queries, results, strict=True):
        context.searches.append(
            SearchRecord(
                query=query, doc_ids=[h.doc_id for h in hits], latency_s=latency, retriever=retriever
            )
        )
    return results


def _bounded(value: str, limit: int, what: str) -> str:
    """`value`, or a `ToolArgumentError` saying how long it is (never quoting it)."""
    if len(value) > limit:
        raise ToolArgumentError(f"{what} is {len(value):,} characters long; keep it under {limit:,}")
    return value


async def _search(arguments: Mapping[str, Any], context: ToolContext) -> str:
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolArgumentError('the search call has no "query" string')
    _bounded(query, MAX_QUERY_CHARS, 'the "query"')
    hits = (await _recorded_search([" ".join(query.split())], context))[0]
    return search_result(hits, context.snippet_chars)


def _queries(arguments: Mapping[str, Any]) -> list[str]:
    queries = arguments.get("queries")
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise ToolArgumentError('the search call has no "queries" list of strings')
    for i, q in enumerate(queries):
        _bounded(q, MAX_QUERY_CHARS, f'query {i + 1} of "queries"')
    squashed = [" ".join(q.split()) for q in queries]
    if not all(squashed):
        raise ToolArgumentError('the search call has an empty query in "queries"')
    return squashed


def _queries_cost(arguments: Mapping[str, Any]) -> int:
    queries = arguments.get("queries")
    return len(queries) if isinstance(queries, list) else 1


async def _search_many(arguments: Mapping[str, Any], context: ToolContext) -> str:
    """Every query is one search; queries past this call's budget are answered as not run."""
    queries = _queries(arguments)
    budget = len(queries) if context.search_budget is None else context.search_budget
    run, not_run = queries[:budget], queries[budget:]
    results = await _recorded_search(run, context) if run else []
    return multi_search_result(run, results, not_run, context.snippet_chars)


async def _open_document(arguments: Mapping[str, Any], context: ToolContext) -> str:
    doc_id = arguments.get("doc_id")
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ToolArgumentError('the open_document call has no "doc_id" string')
    doc_id = _bounded(doc_id.strip(), MAX_DOC_ID_CHARS, 'the "doc_id"')
    return document_result((await context.retriever.adocuments([doc_id]))[0], doc_id)


def _one_argument(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a tool's parameters: one required argument."""
    return {"type": "object", "properties": {name: schema}, "required": [name]}


def _retrieval_tool(
    name: str,
    description: str,
    parameters: dict[str, Any],
    run: ToolRun,
    *,
    search_cost: Callable[[Mapping[str, Any]], int] | None = None,
    registered_as: str | None = None,
) -> Tool:
    """Register a built-in retrieval tool: the three share registration and the "retrieval" failure."""
    tool = Tool(
        name=name,
        description=description,
        parameters=parameters,
        run=run,
        failure="retrieval",
        search_cost=search_cost,
    )
    return TOOLS.register(registered_as or name, tool)


SEARCH = _retrieval_tool(
    SEARCH_TOOL_NAME,
    SEARCH_DESCRIPTION,
    _one_argument("query", {"type": "string", "description": SEARCH_QUERY_DESCRIPTION}),
    _search,
    search_cost=lambda arguments: 1,
)
SEARCH_MANY = _retrieval_tool(
    SEARCH_TOOL_NAME,
    SEARCH_MANY_DESCRIPTION,
    _one_argument(
        "queries",
        {"type": "array", "items": {"type": "string"}, "description": SEARCH_MANY_QUERIES_DESCRIPTION},
    ),
    _search_many,
    search_cost=_queries_cost,
    registered_as="search_many",
)
"""The blog's `search(queries)`: the model sees a tool named `search`; select it as `search_many`
in place of `search` (offering both is an error: two tools named `search`)."""
OPEN_DOCUMENT_TOOL_NAME = "open_document"
OPEN_DOCUMENT = _retrieval_tool(
    OPEN_DOCUMENT_TOOL_NAME,
    OPEN_DOCUMENT_DESCRIPTION,
    _one_argument("doc_id", {"type": "string", "description": OPEN_DOCUMENT_ID_DESCRIPTION}),
    _open_document,
)
SEARCH_TOOL: dict[str, Any] = SEARCH.schema
"""The built-in search tool's schema (what `tools=[...]` holds with the default config)."""

DEFAULT_TOOLS = (SEARCH_TOOL_NAME,)


def resolve_tools(names: Iterable[str]) -> tuple[Tool, ...]:
    """The `Tool`s that configured names (registered or `module:attr`) stand for, in order."""
    tools: list[Tool] = []
    for name in names:
        tool = TOOLS.get(name)
        if not isinstance(tool, Tool):
            raise ConfigError(f"executor tool {name!r} is a {type(tool).__name__}, not an agents.tools.Tool")
        if any(t.name == tool.name for t in tools):
            raise ConfigError(f"executor tools: two tools are named {tool.name!r}")
        tools.append(tool)
    return tuple(tools)

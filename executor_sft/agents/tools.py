"""The executor's tools: `TOOLS`, one table of name -> `Tool` (docs/architecture.md, "Extending").

A tool is a name, the OpenAI function schema the model is offered (also written into SFT
rows), and an async `run(arguments, context) -> str` whose text answers the call. The
executor's config lists the tools by registered name or `package.module:attr`; the runtime
offers all of them on every turn and dispatches each call by name. The built-in `search`
registers here the same way a user's tool does.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from executor_sft.agents.executor_text import SEARCH_DESCRIPTION, SEARCH_QUERY_DESCRIPTION, search_result
from executor_sft.errors import ConfigError
from executor_sft.registry import Registry
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import SearchRecord

SEARCH_TOOL_NAME = "search"


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
    and `n_searches` count these)."""


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
        return "{" + ", ".join(f'"{k}": "..."' for k in self.parameters.get("required", [])) + "}"

    @property
    def failure_label(self) -> str:
        return self.failure or f"tool {self.name}"


TOOLS: Registry[Tool] = Registry("executor tool")


async def _search(arguments: Mapping[str, Any], context: ToolContext) -> str:
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolArgumentError('the search call has no "query" string')
    query = " ".join(query.split())
    start = time.perf_counter()
    hits = (await context.retriever.asearch([query], context.top_k))[0]
    context.searches.append(
        SearchRecord(
            query=query,
            doc_ids=[h.doc_id for h in hits],
            latency_s=time.perf_counter() - start,
            retriever=getattr(context.retriever, "index_id", None),
        )
    )
    return search_result(hits)


SEARCH = TOOLS.register(
    SEARCH_TOOL_NAME,
    Tool(
        name=SEARCH_TOOL_NAME,
        description=SEARCH_DESCRIPTION,
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "description": SEARCH_QUERY_DESCRIPTION}},
            "required": ["query"],
        },
        run=_search,
        failure="retrieval",
    ),
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

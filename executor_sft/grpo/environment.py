"""A per-rollout search environment for TRL's `GRPOTrainer(environment_factory=...)`.

TRL creates one instance per rollout, calls `reset(**example)` before generation, and exposes
every public method except `reset` as a tool; the schema the model sees is derived from the
method's signature and docstring. `search` is built so that schema equals `SEARCH_TOOL`
exactly, and it answers with the runtime's text (`agents.executor_text.search_result`), so the
prompt and every tool turn in GRPO render as in the rollouts and SFT rows.

Differences from the runtime loop (listed in docs/grpo.md): TRL's environment answers tool
calls but cannot add a message, so the notice the runtime adds after the search that spends
the budget is missing from GRPO's last turn; once `max_searches` is spent, a further `search`
answers with that notice instead of passages. The number of turns is capped by
`GRPOConfig.max_tool_calling_iterations`. A turn of several calls: TRL calls `search` once per
call, in order, as the runtime runs each (concurrently); both count one search per query, so
the passages agree. TRL has no per-turn cap (the runtime's `parallel_calls`), and calls past the
budget read the notice here but a correction in the runtime.
`environment_class(tools)` picks the environment whose methods are the executor's configured
tools: `search_many` (the same `search`, taking `queries`) and the access tool `open_document`
(search then shows snippets with ids), with the runtime's schemas and texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from executor_sft.agents.executor_text import (
    SNIPPET_CHARS,
    document_result,
    multi_search_result,
    search_result,
)
from executor_sft.agents.prompting import Prompts
from executor_sft.agents.tools import (
    OPEN_DOCUMENT,
    OPEN_DOCUMENT_TOOL_NAME,
    SEARCH,
    SEARCH_MANY,
    SEARCH_TOOL,
    SEARCH_TOOL_NAME,
    resolve_tools,
)
from executor_sft.errors import ConfigError
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import SearchRecord


def _docstring(schema: dict[str, Any]) -> str:
    """The Google-style docstring transformers' `get_json_schema` reads back as `schema`."""
    fn = schema["function"]
    args = "".join(f"    {name}: {p['description']}\n" for name, p in fn["parameters"]["properties"].items())
    return f"{fn['description']}\n\nArgs:\n{args}"


def _search_docstring() -> str:
    return _docstring(SEARCH_TOOL)


class SearchEnvironment:
    """One executor rollout's view of the corpus: `search(query)` -> top-k passages, budgeted."""

    def __init__(
        self, retriever: Retriever, top_k: int = 3, max_searches: int = 2, budget_notice: str | None = None
    ):
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if max_searches < 0:
            raise ValueError(f"max_searches must be >= 0, got {max_searches}")
        self._retriever = retriever
        self._top_k = top_k
        self._max_searches = max_searches
        self._budget_notice = budget_notice or Prompts().search_budget_spent
        self._snippet_chars: int | None = None
        self.searches: list[SearchRecord] = []
        self.example: dict[str, Any] = {}

    def reset(self, **example: Any) -> None:
        """Start a rollout; the prompt (system + sub-query) already comes from the dataset."""
        self.searches = []
        self.example = example
        return None

    def search(self, query: str):  # no return annotation: it would add a "return" key to the tool schema
        query = " ".join(str(query).split())
        if len(self.searches) >= self._max_searches:
            return self._budget_notice
        hits = self._retriever.search([query], self._top_k)[0] if query else []
        self.searches.append(SearchRecord(query=query, doc_ids=[h.doc_id for h in hits]))
        return search_result(hits, self._snippet_chars)

    search.__doc__ = _search_docstring()
    search.__name__ = SEARCH_TOOL_NAME

    @property
    def n_searches(self) -> int:
        return len(self.searches)


class SearchManyEnvironment(SearchEnvironment):
    """`search(queries)` (the `search_many` tool): each query one search, past the budget not run."""

    def search(self, queries: list[str]):  # type: ignore[override]  # the search_many tool's signature
        queries = [" ".join(str(q).split()) for q in (queries if isinstance(queries, list) else [queries])]
        left = max(self._max_searches - len(self.searches), 0)
        if left == 0:
            return self._budget_notice
        run, not_run = queries[:left], queries[left:]
        results = self._retriever.search(run, self._top_k) if run else []
        for query, hits in zip(run, results, strict=True):
            self.searches.append(SearchRecord(query=query, doc_ids=[h.doc_id for h in hits]))
        return multi_search_result(run, results, not_run, self._snippet_chars)

    search.__doc__ = _docstring(SEARCH_MANY.schema)
    search.__name__ = SEARCH_TOOL_NAME


class _Access:
    """The access tool: a passage's whole document; search shows snippets with ids."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._snippet_chars = SNIPPET_CHARS

    def open_document(self, doc_id: str):
        doc_id = str(doc_id).strip()
        return document_result(self._retriever.documents([doc_id])[0] if doc_id else None, doc_id)

    open_document.__doc__ = _docstring(OPEN_DOCUMENT.schema)
    open_document.__name__ = OPEN_DOCUMENT_TOOL_NAME


class AccessSearchEnvironment(_Access, SearchEnvironment):
    """`search(query)` + `open_document(doc_id)`."""


class AccessSearchManyEnvironment(_Access, SearchManyEnvironment):
    """`search(queries)` + `open_document(doc_id)`."""


def environment_class(tools: tuple[str, ...] | list[str]) -> type[SearchEnvironment]:
    """The environment whose tools are the executor's `tools` (config names, as `pipeline.tools`)."""
    resolved = resolve_tools(tools)
    searches = [t for t in resolved if t in (SEARCH, SEARCH_MANY)]
    others = [t for t in resolved if t not in (SEARCH, SEARCH_MANY, OPEN_DOCUMENT)]
    if len(searches) != 1 or others:
        raise ConfigError(
            f"GRPO tools {list(tools)}: need one of 'search' and 'search_many', plus optionally "
            "'open_document' (other tools have no GRPO environment)"
        )
    access = OPEN_DOCUMENT in resolved
    if searches[0] is SEARCH_MANY:
        return AccessSearchManyEnvironment if access else SearchManyEnvironment
    return AccessSearchEnvironment if access else SearchEnvironment


def search_tool(retriever: Retriever, top_k: int = 3):
    """The search tool as one plain function, for trainers that take `tools=` (TRL's DistillationTrainer).

    Same name, schema and result text as `SearchEnvironment.search`, without a per-rollout
    budget: such trainers call tools without saying whose rollout the call belongs to, so the
    budget is the number of tool turns (`max_tool_calling_iterations = max_searches`).
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")

    def search(query: str):  # no return annotation: it would add a "return" key to the tool schema
        query = " ".join(str(query).split())
        return search_result(retriever.search([query], top_k)[0] if query else [])

    search.__doc__ = _search_docstring()
    search.__name__ = SEARCH_TOOL_NAME
    return search


@dataclass
class SearchEnvironmentFactory:
    """Picklable zero-argument factory TRL calls once per rollout; all instances share one retriever."""

    retriever: Retriever
    top_k: int = 3
    max_searches: int = 2
    budget_notice: str | None = None
    tools: tuple[str, ...] = (SEARCH_TOOL_NAME,)
    """The executor's tools (`environment_class`); the default is `search` alone."""
    created: list[SearchEnvironment] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.environment = environment_class(self.tools)

    def __call__(self) -> SearchEnvironment:
        env = self.environment(self.retriever, self.top_k, self.max_searches, self.budget_notice)
        self.created.append(env)
        return env

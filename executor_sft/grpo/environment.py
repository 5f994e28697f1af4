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
budget read the notice here but a correction in the runtime. `search_many` and `open_document`
are not offered in GRPO yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from executor_sft.agents.executor_text import search_result
from executor_sft.agents.prompting import Prompts
from executor_sft.agents.tools import SEARCH_TOOL, SEARCH_TOOL_NAME
from executor_sft.retrieval.base import Retriever
from executor_sft.schema import SearchRecord


def _search_docstring() -> str:
    fn = SEARCH_TOOL["function"]
    arg = fn["parameters"]["properties"]["query"]["description"]
    return f"{fn['description']}\n\nArgs:\n    query: {arg}\n"


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
        return search_result(hits)

    search.__doc__ = _search_docstring()
    search.__name__ = SEARCH_TOOL_NAME

    @property
    def n_searches(self) -> int:
        return len(self.searches)


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
    created: list[SearchEnvironment] = field(default_factory=list, repr=False)

    def __call__(self) -> SearchEnvironment:
        env = SearchEnvironment(self.retriever, self.top_k, self.max_searches, self.budget_notice)
        self.created.append(env)
        return env

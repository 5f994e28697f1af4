"""`ExecutorSettings`: everything that shapes an executor run besides the model, the retriever
and the sub-query. It is resolved once per role (`PipelineConfig.executor_settings`) and the
same object drives collection, the single-agent baseline and executor evaluation, so a model is
evaluated with exactly the prompt, budget and protocol it was trained under."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from executor_sft.agents.prompting import Prompts
from executor_sft.agents.tools import DEFAULT_TOOLS, SEARCH, resolve_tools
from executor_sft.errors import ConfigError
from executor_sft.llm.base import SamplingParams

Protocol = Literal["native", "tag"]

PARALLEL_CALLS = 5
"""Tool calls run per turn, WideSeek-R1's cap for its sub-agents (arXiv 2602.04634, App. D, "Agent Configuration")."""


def resolve_max_searches(max_turns: int, max_searches: int | None) -> int:
    """Default `max_turns - 1`; a larger value is an error (the last turn must be able to report)."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if max_searches is None:
        return max_turns - 1
    if not 0 <= max_searches <= max_turns - 1:
        raise ValueError(f"max_searches must be in [0, max_turns - 1 = {max_turns - 1}], got {max_searches}")
    return max_searches


def check_tools(tools: tuple[str, ...] | list[str], protocol: str) -> None:
    """The tool names resolve, and the tag protocol (which knows only `<search>`) has only search."""
    resolved = resolve_tools(tools)
    if protocol == "tag" and resolved != (SEARCH,):
        raise ConfigError(f"the tag protocol has only <search>; tools {list(tools)} need protocol 'native'")


@dataclass(frozen=True, slots=True)
class ExecutorSettings:
    max_turns: int = 3
    max_searches: int | None = None
    """None: `max_turns - 1` (the last turn can only report; a search past the budget is refused)."""
    top_k: int = 3
    protocol: Protocol = "native"
    sampling: SamplingParams | None = None
    """None: the model's own defaults."""
    prompts: Prompts = field(default_factory=Prompts)
    system_prompt: str | None = None
    """Replaces the protocol's executor prompt (the single-agent baseline uses its own)."""
    tools: tuple[str, ...] = DEFAULT_TOOLS
    """The tools offered on every turn: names in `agents.tools.TOOLS` or `package.module:attr`."""
    parallel_calls: int = PARALLEL_CALLS
    """Tool calls of one turn that run (concurrently); further calls are answered as not run."""

    def __post_init__(self) -> None:
        if self.protocol not in ("native", "tag"):
            raise ValueError(f"protocol must be 'native' or 'tag', got {self.protocol!r}")
        if self.parallel_calls < 1:
            raise ValueError(f"parallel_calls must be >= 1, got {self.parallel_calls}")
        resolve_max_searches(self.max_turns, self.max_searches)
        object.__setattr__(self, "tools", tuple(self.tools))
        check_tools(self.tools, self.protocol)

    @property
    def searches(self) -> int:
        """The search cap in effect."""
        return resolve_max_searches(self.max_turns, self.max_searches)

    def replace(self, **changes: object) -> ExecutorSettings:
        """A copy with `changes`; `prompts=None` means the packaged prompts."""
        if "prompts" in changes and changes["prompts"] is None:
            changes["prompts"] = Prompts()
        return dataclasses.replace(self, **changes)

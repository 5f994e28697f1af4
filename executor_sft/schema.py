"""Typed records of the episode schema v1 (DESIGN.md, "Episode record").

These field names are the contract between stages and with outside tools: add fields,
never rename them. Every model allows extra fields so records written by newer versions or
other tools round-trip unchanged, and only the fields a stage needs are required.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EPISODE_SCHEMA = "executor_sft.episode/v1"

Message = dict[str, Any]
"""An OpenAI-style chat message: role, content, optional tool_calls / reasoning_content / tool_call_id."""

Finish = Literal["report", "turn_budget", "invalid", "error"]
StopReason = Literal["stopped", "round_budget", "error"]


class Record(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=False)

    @classmethod
    def from_json(cls, text: str | bytes):
        return cls.model_validate_json(text)


class Question(Record):
    id: str
    question: str
    golden_answers: list[str]
    dataset: str = "unknown"
    positive_doc_ids: list[str] | None = None


class Usage(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage | TokenUsage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += _calls_of(other)


class TokenUsage(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0


def _calls_of(usage: Usage | TokenUsage) -> Any:
    """`getattr(usage, "calls", 1)` without pydantic's slow missing-attribute path (TokenUsage has no field)."""
    if type(usage) is TokenUsage:
        extra = usage.__pydantic_extra__
        return extra.get("calls", 1) if extra else 1
    return getattr(usage, "calls", 1)


class LLMCallRecord(Record):
    """One model call, complete enough to replay and audit it."""

    model: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    response: Message = Field(default_factory=lambda: {"role": "assistant", "content": ""})
    usage: TokenUsage = Field(default_factory=TokenUsage)
    latency_s: float = 0.0
    error: str | None = None


class SearchRecord(Record):
    query: str
    doc_ids: list[str] = Field(default_factory=list)


class Report(Record):
    answer: str
    evidence: str = ""


class Outcome(Record):
    """The final answer a run yields when its report is substituted into the episode."""

    answer: str | None = None
    em: float = 0.0
    f1: float = 0.0
    judge: bool | None = None


class ExecutorRun(Record):
    run_id: str
    round: int
    sub_query_index: int
    sub_query: str
    role: str
    model: str
    max_turns: int
    max_searches: int
    messages: list[Message] = Field(default_factory=list)
    searches: list[SearchRecord] = Field(default_factory=list)
    n_searches: int = 0
    finish: Finish = "error"
    report: Report | None = None
    outcome: Outcome | None = None
    counterfactual_of: str | None = None
    usage: Usage = Field(default_factory=Usage)


class Round(Record):
    index: int
    sub_queries: list[str] = Field(default_factory=list)
    backbone: LLMCallRecord | None = None


class EpisodeMetrics(Record):
    em: float = 0.0
    f1: float = 0.0
    judge: bool | None = None


class Episode(Record):
    schema_: str = Field(default=EPISODE_SCHEMA, alias="schema")
    episode_id: str
    sample_index: int = 0
    question: Question
    config: dict[str, Any] = Field(default_factory=dict)
    rounds: list[Round] = Field(default_factory=list)
    runs: list[ExecutorRun] = Field(default_factory=list)
    answer: str | None = None
    metrics: EpisodeMetrics = Field(default_factory=EpisodeMetrics)
    usage: dict[str, Usage] = Field(default_factory=dict)
    stop_reason: StopReason = "stopped"
    error: str | None = None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def runs_for(self, role: str) -> list[ExecutorRun]:
        return [r for r in self.runs if r.role == role]

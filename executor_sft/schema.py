"""Typed records of the episode schema v1: the contract between stages (docs/architecture.md).

Every field a writer always writes is declared here, so readers use attributes. Field names
never change: add fields, never rename them. Every model allows extra fields so records written
by newer versions or other tools round-trip unchanged, and only the fields a stage needs are
required, so episodes written before a field was declared still load. Fields that some writers
leave out are declared with `exclude_if=_absent` so a record is written exactly as before.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EPISODE_SCHEMA = "executor_sft.episode/v1"


class Role:
    """Role names as episodes record them (`run.role`, `usage` keys) and configs name them."""

    BACKBONE = "backbone"
    ANSWERER = "answerer"
    JUDGE = "judge"
    TEACHER = "teacher"
    STUDENT = "student"
    TEACHER_BUDGET1 = "teacher_budget1"
    """The teacher re-run with one search (the counterfactual of a multi-search teacher run)."""
    SINGLE_AGENT = "single_agent"
    ANSWERER_OUTCOMES = "answerer_outcomes"
    """Usage key of the answerer calls that label shadow and counterfactual runs."""
    BACKBONE_REPLAY = "backbone_replay"
    """Usage key of the backbone calls of replayed outcomes (`outcome.mode: replay`)."""
    EXECUTOR_REPLAY = "executor_replay"
    """Usage key of the driver-executor calls of replayed outcomes (`outcome.mode: replay`)."""


def episode_id(question_id: str, sample_index: int, driver: str | None = None) -> str:
    """The id of a question's `sample_index`-th episode (what resume and merges match on).

    Shadow collection (one episode per question and sample, `driver` None): `<question_id>#<sample>`.
    Separate collection (one episode per question, sample and driving executor role):
    `<question_id>#<sample>@<driver>`; role names contain neither `#` nor `@`, so ids stay unique.
    """
    if driver is None:
        return f"{question_id}#{sample_index}"
    return f"{question_id}#{sample_index}@{driver}"


def _absent(value: Any) -> bool:
    return value is None


Message = dict[str, Any]


def content_text(content: Any) -> str:
    """A message's `content` as text: a string as is, OpenAI content parts joined by their `text`.

    None (a tool-call-only turn) is ""; parts without a string `text` (an image) add nothing.
    """
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return str(content)


"""An OpenAI-style chat message: role, content, optional tool_calls / reasoning_content / tool_call_id."""

Finish = Literal["report", "turn_budget", "invalid", "error"]
StopReason = Literal["stopped", "round_budget", "error"]


def _calls_a_tool(message: Message) -> bool:
    return bool(message.get("tool_calls")) or "<search>" in content_text(message.get("content")).lower()


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
    split: str | None = Field(default=None, exclude_if=_absent)
    """The source set's split (e.g. minibench's train/dev), where it has one."""
    unique_columns: list[str] | None = Field(default=None, exclude_if=_absent)
    """A table question (a wide task): the gold answer is one Markdown table and these columns
    identify its rows (`executor_sft.metrics.table_scores`). Absent for a text question."""
    column_rules: dict[str, dict[str, Any]] | None = Field(default=None, exclude_if=_absent)
    """A table question's per-column comparison (`executor_sft.metrics.table.ColumnRule`: metric
    `exact_match | number_near | llm_judge`, preprocess, criterion), WideSearch's `eval_pipeline`;
    a column without one gets the inferred rule. Absent: every column inferred."""

    @property
    def answer_format(self) -> Literal["text", "table"]:
        return "table" if self.unique_columns else "text"


class Usage(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, other: Usage | TokenUsage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += calls_of(other)


class TokenUsage(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0


def calls_of(usage: Usage | TokenUsage) -> Any:
    """`getattr(usage, "calls", 1)` without pydantic's slow missing-attribute path (TokenUsage has no field)."""
    if type(usage) is TokenUsage:
        extra = usage.__pydantic_extra__
        return extra.get("calls", 1) if extra else 1
    return getattr(usage, "calls", 1)


class SampledTokens(Record):
    """The token ids a model sampled for one reply, as its backend returned them.

    Training re-renders the reply from its parsed message (tool-call arguments re-serialised), so
    these ids are what tells whether the tokens trained on are the tokens sampled
    (`executor_sft.sft.fidelity`)."""

    ids: list[int]
    """The completion's ids in order, the end-of-turn token included when generation stopped on it."""
    vocabulary: str | None = None
    """`executor_sft.llm.vocabulary.vocabulary_id` of the tokenizer the ids belong to (None: unknown)."""


class LLMCallRecord(Record):
    """One model call, complete enough to replay and audit it."""

    model: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    response: Message = Field(default_factory=lambda: {"role": "assistant", "content": ""})
    usage: TokenUsage = Field(default_factory=TokenUsage)
    latency_s: float = 0.0
    error: str | None = None
    sampled_tokens: SampledTokens | None = Field(default=None, exclude_if=_absent)
    """The ids the model sampled for `response`, where the backend returns them (transformers always,
    vLLM in process always, an OpenAI-compatible vLLM server with `return_token_ids`); absent otherwise."""


class SearchRecord(Record):
    query: str
    doc_ids: list[str] = Field(default_factory=list)
    latency_s: float | None = Field(default=None, exclude_if=_absent)
    """Wall time of this one search call (T_search), as the tool awaited it: under concurrent
    episodes it includes waiting for the retriever's thread or server behind other calls."""
    retriever: str | None = Field(default=None, exclude_if=_absent)
    """The `index_id` of the retriever that answered: index contents and every stage on top
    (e.g. `llm_rerank(<model>;n50;w512)/hybrid-...`)."""


class Report(Record):
    answer: str
    evidence: str = ""


class Outcome(Record):
    """The final answer a run yields when its report is substituted into the episode."""

    answer: str | None = None
    em: float = 0.0
    f1: float = 0.0
    judge: bool | None = None
    substituted: bool | None = Field(default=None, exclude_if=_absent)
    """False: the driver's own answer; True: the answerer re-run with this run's report swapped in."""
    answerer_call: dict[str, Any] | None = Field(default=None, exclude_if=_absent)
    """The substituted answerer call (an `LLMCallRecord` as JSON)."""
    mode: Literal["substitute", "replay"] | None = Field(default=None, exclude_if=_absent)
    """How a substituted outcome was made: absent = "substitute" (the answerer re-run with this
    run's report swapped in; every record written before this field), "replay" (the backbone
    re-run from this run's round with its report in place of the driver's; see `replay`)."""
    replay: dict[str, Any] | None = Field(default=None, exclude_if=_absent)
    """`mode: replay` only: the replayed trajectory, `{"from_round", "rounds": [Round], "runs":
    [ExecutorRun], "stop_reason", "error", "usage": {role: Usage}}` (rounds after `from_round`;
    their sub-queries were executed by the driver). The answerer call is `answerer_call`."""
    error: str | None = Field(default=None, exclude_if=_absent)


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
    protocol: Literal["native", "tag"] = "native"
    top_k: int | None = None
    index_id: str | None = None
    """The retriever's index id (what cached retrieval is keyed by)."""
    calls: list[dict[str, Any]] = Field(default_factory=list)
    """One `LLMCallRecord` (as JSON, with `t_start`) per model call, in order."""
    n_corrections: int = 0
    error: str | None = None

    @property
    def n_turns(self) -> int:
        """Assistant turns the run took: what `max_turns` budgets, as `max_searches` budgets
        `n_searches` (one search = one query, however many a turn holds)."""
        return sum(1 for m in self.messages or [] if isinstance(m, dict) and m.get("role") == "assistant")

    @property
    def n_tool_turns(self) -> int:
        """Assistant turns that called tools (a turn of several parallel calls counts once)."""
        return sum(
            1
            for m in self.messages or []
            if isinstance(m, dict) and m.get("role") == "assistant" and _calls_a_tool(m)
        )

    def correctness_failure(self, require_judge: bool = True, min_em: float = 1.0) -> str | None:
        """Why this run is not correct (`not_report`, `no_outcome`, `wrong_em`, `judge_null`,
        `judge_false`), or None.

        Correct = finished with a report, `outcome.em >= min_em` (EM is 0/1, so == 1 by default)
        and, when `require_judge`, `outcome.judge is True`. Collection (which runs to re-run) and
        the filter (which runs to keep) both decide with this one method.
        """
        if self.finish != "report":
            return "not_report"
        if self.outcome is None:
            return "no_outcome"
        if self.outcome.em < min_em:
            return "wrong_em"
        if require_judge and self.outcome.judge is not True:
            return "judge_null" if self.outcome.judge is None else "judge_false"
        return None

    def is_correct(self, require_judge: bool = True, min_em: float = 1.0) -> bool:
        return self.correctness_failure(require_judge, min_em) is None


class Round(Record):
    index: int
    sub_queries: list[str] = Field(default_factory=list)
    backbone: LLMCallRecord | None = None
    dropped_sub_queries: int | None = Field(default=None, exclude_if=_absent)
    """How many sub-queries the backbone wrote that were not executed (repeats, past the limit)."""


class EpisodeMetrics(Record):
    """For a table question em is the table's success, f1 its item F1 and judge whether it succeeded
    (docs/wide.md, "Table metrics"); the three table scores are also kept under their own names."""

    em: float = 0.0
    f1: float = 0.0
    judge: bool | None = None
    item_f1: float | None = Field(default=None, exclude_if=_absent)
    row_f1: float | None = Field(default=None, exclude_if=_absent)
    success: float | None = Field(default=None, exclude_if=_absent)


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
    answerer: LLMCallRecord | None = Field(default=None, exclude_if=_absent)
    """The final answerer call of a pipeline episode (single-agent episodes have none)."""
    research_s: float | None = Field(default=None, exclude_if=_absent)
    """Research-phase wall time (the search-agent blog's Research P50 measures this): backbone
    rounds and their executor runs, up to the answerer; for a single agent, its whole run.
    Episodes run concurrently share the machine and the model servers, so this is the time the
    user waited under that load, not the episode's time alone."""
    driver: str | None = Field(default=None, exclude_if=_absent)
    """Separate collection only (`collection.mode: separate`): the executor role that drove this
    episode alone (no shadow runs). Absent in shadow collection."""

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def runs_for(self, role: str) -> list[ExecutorRun]:
        return [r for r in self.runs if r.role == role]

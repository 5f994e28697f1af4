"""The backbone: a multi-round conversation that delegates sub-queries and never answers.

The pipeline drives it: `decide()` asks for the next round (sub-queries or stop), and
`add_reports()` feeds back the driver executor's reports for the round just executed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from executor_sft.agents.calls import call_model
from executor_sft.agents.parsing import BackboneDecision, parse_subqueries, render_report
from executor_sft.agents.prompting import Prompts, fill
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.schema import LLMCallRecord, Message, Report


@dataclass
class BackboneStep:
    decision: BackboneDecision
    record: LLMCallRecord
    error: str | None = None


class BackboneSession:
    """One backbone conversation for one question."""

    def __init__(
        self,
        model: ChatModel,
        question: str,
        *,
        max_parallel: int = 3,
        max_rounds: int = 4,
        prompts: Prompts | None = None,
        sampling: SamplingParams | None = None,
    ):
        self.model = model
        self.max_parallel = max_parallel
        self.max_rounds = max_rounds
        self.prompts = prompts or Prompts()
        self.sampling = sampling
        system = self.prompts.render("backbone", max_parallel=max_parallel, max_rounds=max_rounds)
        self.messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Question: {question}"},
        ]

    async def decide(self) -> BackboneStep:
        """Ask for the next round; a failed call comes back as a stop with `error` set."""
        result = await call_model(self.model, self.messages, None, self.sampling)
        if result.message is None:
            return BackboneStep(BackboneDecision(stop=True), result.record, result.error)
        # Only the visible content goes back into the conversation (reasoning stays in the record).
        self.messages.append({"role": "assistant", "content": result.message.get("content") or ""})
        return BackboneStep(parse_subqueries(result.message.get("content"), self.max_parallel), result.record)

    def add_reports(
        self, round_index: int, pairs: Sequence[tuple[str, Report | None]], rounds_left: int
    ) -> None:
        reports = "\n\n".join(
            f"[{i}] Sub-query: {q}\nReport: {render_report(r)}" for i, (q, r) in enumerate(pairs, start=1)
        )
        text = fill(
            self.prompts.backbone_reports, round=round_index + 1, reports=reports, rounds_left=rounds_left
        )
        self.messages.append({"role": "user", "content": text})

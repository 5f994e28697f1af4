"""The fixed answerer: question + (sub-query, report) pairs in, a short answer out.

It sees nothing else: no backbone reasoning, no raw passages. Reports are rendered from
the `Report` objects, so what it reads does not depend on how an executor formatted its reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from executor_sft.agents.calls import call_model
from executor_sft.agents.parsing import parse_final_answer, render_report
from executor_sft.agents.prompting import Prompts
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.schema import LLMCallRecord, Message, Report

Finding = tuple[str, Report | None]
"""(sub-query, report) as the answerer sees it."""


def render_findings(question: str, findings: Sequence[Finding]) -> str:
    lines = [f"Question: {question}", ""]
    if not findings:
        lines.append("Findings: none (no sub-agent was consulted).")
    else:
        lines.append("Findings:")
        for i, (sub_query, report) in enumerate(findings, start=1):
            lines += ["", f"[{i}] Sub-query: {sub_query}", f"Report: {render_report(report)}"]
    return "\n".join(lines)


def answerer_messages(
    question: str, findings: Sequence[Finding], prompts: Prompts | None = None
) -> list[Message]:
    prompts = prompts or Prompts()
    return [
        {"role": "system", "content": prompts.get("answerer")},
        {"role": "user", "content": render_findings(question, findings)},
    ]


@dataclass
class AnswerResult:
    answer: str | None
    """None when the call failed (then `error` says why)."""
    record: LLMCallRecord
    error: str | None = None


async def run_answerer(
    model: ChatModel,
    question: str,
    findings: Sequence[Finding],
    *,
    prompts: Prompts | None = None,
    sampling: SamplingParams | None = None,
) -> AnswerResult:
    result = await call_model(model, answerer_messages(question, findings, prompts), None, sampling)
    if result.message is None:
        return AnswerResult(answer=None, record=result.record, error=result.error)
    return AnswerResult(answer=parse_final_answer(result.message.get("content")), record=result.record)

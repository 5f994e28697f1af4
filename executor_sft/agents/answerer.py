"""The fixed answerer: question + (sub-query, report) pairs in, a short answer out (or a table).

It sees nothing else: no backbone reasoning, no raw passages. Reports are rendered from
the `Report` objects, so what it reads does not depend on how an executor formatted its reply.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from executor_sft.agents.calls import call_model
from executor_sft.agents.parsing import parse_final_answer, render_report
from executor_sft.agents.prompting import Prompts
from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.llm.parsing import strip_think
from executor_sft.schema import LLMCallRecord, Message, Report

Finding = tuple[str, Report | None]
"""(sub-query, report) as the answerer sees it."""
AnswerFormat = Literal["text", "table"]
"""What the answerer is asked for: a short answer, or a Markdown table (a wide task's question)."""

_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
PROMPT_OF_FORMAT: dict[str, str] = {"text": "answerer", "table": "answerer_table"}


def parse_table_answer(text: str | None) -> str:
    """A table answer: the last non-empty `<answer>` block (else the visible reply), one stripped line
    per table line. Unlike `parse_final_answer` it keeps the line breaks a Markdown table needs."""
    visible = strip_think(text)
    blocks = [b for b in _ANSWER_BLOCK.findall(visible) if b.strip()]
    body = blocks[-1] if blocks else visible
    return "\n".join(line.strip() for line in body.splitlines() if line.strip())


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
    question: str,
    findings: Sequence[Finding],
    prompts: Prompts | None = None,
    answer_format: AnswerFormat = "text",
) -> list[Message]:
    prompts = prompts or Prompts()
    return [
        {"role": "system", "content": prompts.get(PROMPT_OF_FORMAT[answer_format])},
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
    answer_format: AnswerFormat = "text",
) -> AnswerResult:
    messages = answerer_messages(question, findings, prompts, answer_format)
    result = await call_model(model, messages, None, sampling)
    if result.message is None:
        return AnswerResult(answer=None, record=result.record, error=result.error)
    parse = parse_table_answer if answer_format == "table" else parse_final_answer
    return AnswerResult(answer=parse(result.message.get("content")), record=result.record)

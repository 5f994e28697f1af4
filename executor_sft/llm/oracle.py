"""An oracle-decomposition backbone: a data source with known behaviour, NOT an LLM stand-in.

`OracleBackbone` is a `ChatModel` for the backbone role that plays out a question's gold
decomposition through the real backbone protocol (docs/protocols.md), so real executors get
real sub-queries over a real corpus even when no capable backbone is at hand (the offline
minibench configs). Like the scripted policies of `executor_sft.synthetic`, it is there to
produce episodes whose backbone behaviour is known; its episodes say nothing about how well a
model plans.

- **MuSiQue questions** carry a `decomposition`: a list of hops `{"question", "answer", ...}`
  whose later questions refer to earlier answers as `#k` (e.g. `"#1 >> capital"`). The oracle
  dispatches one hop per round, in order, as `<subquery>hop text</subquery>`, and replies
  `<stop/>` once every hop was dispatched. Hop texts are sent as the dataset writes them (some
  are MuSiQue's `entity >> relation` form), with `#k` filled in.
- **`#k` in `mode="report"`** (default) is the report answer of hop k, read from the round
  feedback the backbone sees (`<answer>A</answer>` after the sub-query, as
  `BackboneSession.add_reports` renders it), so a wrong report propagates as it would with a
  real backbone. If hop k has no report (`(no report: ...)`, or no `<answer>` tag), the oracle
  cannot write the next hop and stops.
- **`#k` in `mode="gold"`** ("gold chain") is hop k's gold answer, whatever the reports said:
  every hop is dispatched with the correct entity, so each executor run is graded against a
  sub-query that has a known answer.
- **Questions without a decomposition** (HotpotQA, 2Wiki, ...) get the whole question as one
  sub-query in the first round, then `<stop/>`. A question the file does not hold is treated
  the same way (and logged once), so a mis-pointed `questions:` path shows in the log.

The question is recognised from the backbone's first user message (`Question: <text>`). The
oracle spends no tokens: its usage is zero prompt and completion tokens (one call per round).

Select it in a config's `models.backbone` with
`{backend: oracle, questions: <questions file>, mode: report|gold}` (`executor_sft.llm.config`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from executor_sft.errors import InputError
from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.schema import Message, Question, TokenUsage, content_text

logger = logging.getLogger(__name__)

OracleMode = Literal["report", "gold"]
ORACLE_MODES: tuple[str, ...] = ("report", "gold")
DEFAULT_NAME = "oracle-decomposition"
STOP = "<stop/>"
QUESTION_PREFIX = "Question:"

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_SUBQUERY = re.compile(r"<subquery>(.*?)</subquery>", re.IGNORECASE | re.DOTALL)
_REF = re.compile(r"#(\d+)")


def _squash(text: str) -> str:
    return " ".join(text.split())


def hops_of(question: Question) -> list[dict[str, Any]]:
    """A question's decomposition hops (MuSiQue's `decomposition` field), or [] when it has none."""
    hops = (question.model_extra or {}).get("decomposition") or []
    return [h for h in hops if isinstance(h, dict) and str(h.get("question") or "").strip()]


def fill_references(text: str, answers: Sequence[str | None]) -> str | None:
    """`text` with each `#k` replaced by `answers[k-1]`; None if a referenced answer is missing."""
    missing = False

    def sub(match: re.Match[str]) -> str:
        nonlocal missing
        k = int(match.group(1))
        if 1 <= k <= len(answers) and answers[k - 1]:
            return str(answers[k - 1])
        missing = True
        return match.group(0)

    filled = _REF.sub(sub, text)
    return None if missing else _squash(filled)


def report_answers(messages: Sequence[Message]) -> list[str | None]:
    """For each backbone round so far, the answer reported for the sub-query it dispatched.

    Round i's feedback is the first user message after the i-th assistant message; the answer
    is the first `<answer>` after the dispatched sub-query's text (or anywhere in the message
    when the text is not quoted). None where there is no feedback or no answer.
    """
    out: list[str | None] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        feedback = next((m for m in messages[i + 1 :] if m.get("role") in ("user", "assistant")), None)
        if feedback is None or feedback.get("role") != "user":
            out.append(None)
            continue
        text = content_text(feedback.get("content"))
        dispatched = [_squash(q) for q in _SUBQUERY.findall(content_text(message.get("content")))]
        start = text.find(dispatched[0]) if dispatched else -1
        found = _ANSWER.findall(text[start:] if start >= 0 else text)
        answer = _squash(found[0]) if found else ""
        out.append(answer or None)
    return out


class OracleBackbone:
    """Oracle-decomposition backbone policy (a `ChatModel`): gold hops one per round, then stop."""

    def __init__(
        self, questions: Sequence[Question], *, mode: OracleMode = "report", name: str = DEFAULT_NAME
    ):
        if mode not in ORACLE_MODES:
            raise ValueError(f"oracle mode must be one of {ORACLE_MODES}, got {mode!r}")
        self.mode = mode
        self.name = name
        self._by_text: dict[str, Question] = {}
        for q in questions:
            self._by_text.setdefault(_squash(q.question), q)
        self._unknown_logged = False

    @classmethod
    def from_file(
        cls, path: str | Path, *, mode: OracleMode = "report", name: str = DEFAULT_NAME
    ) -> OracleBackbone:
        """The oracle over every question of a file `executor_sft.data.load_questions` reads."""
        from executor_sft.data.questions import load_questions

        questions = load_questions(path, duplicates="keep")
        if not questions:
            raise InputError(f"{path}: no questions for the oracle backbone")
        return cls(questions, mode=mode, name=name)

    def find(self, text: str) -> Question | None:
        """The question a backbone's first user message asks (exact text, else the longest quoted one)."""
        body = _squash(text)
        if body.startswith(QUESTION_PREFIX):
            body = body[len(QUESTION_PREFIX) :].strip()
        if body in self._by_text:
            return self._by_text[body]
        quoted = [t for t in self._by_text if t and t in body]
        return self._by_text[max(quoted, key=len)] if quoted else None

    def reply(self, messages: Sequence[Message]) -> str:
        """The next backbone reply for this conversation (`<subquery>...</subquery>` or `<stop/>`)."""
        first = next((content_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        done = sum(1 for m in messages if m.get("role") == "assistant")
        question = self.find(first)
        hops = hops_of(question) if question is not None else []
        if not hops:
            if question is None and not self._unknown_logged:
                self._unknown_logged = True
                logger.warning(
                    "oracle backbone: question not in its questions file, dispatched whole: %.80s", first
                )
            whole = question.question if question is not None else first.removeprefix(QUESTION_PREFIX)
            return STOP if done or not whole.strip() else _dispatch(_squash(whole))
        if done >= len(hops):
            return STOP
        if self.mode == "gold":
            answers: list[str | None] = [str(h.get("answer") or "") or None for h in hops[:done]]
        else:
            answers = report_answers(messages)[:done]
        sub_query = fill_references(str(hops[done]["question"]), answers)
        return STOP if sub_query is None else _dispatch(sub_query)

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        message = {"role": "assistant", "content": self.reply(messages)}
        return ChatResult(
            message=message, usage=TokenUsage(), latency_s=0.0, model=self.name, finish_reason="stop"
        )


def _dispatch(sub_query: str) -> str:
    return f"<subquery>{sub_query}</subquery>"

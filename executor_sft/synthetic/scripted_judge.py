"""A scripted judge for the synthetic world: a data source for the demo and the tests.

It is NOT a stand-in for the LLM judge. The world's answers are names, years and numbers
with their aliases listed, so normalised exact match over the gold answers is the right
verdict there; this lets filters that require a judge verdict run offline.
"""

from __future__ import annotations

import re

from executor_sft.metrics.answer import exact_match
from executor_sft.schema import Message, content_text
from executor_sft.synthetic._chat import TextReplyModel

_GOLD = re.compile(r"^Gold answer\(s\):[ \t]*(.*)$", re.M)
_PRED = re.compile(r"^Predicted answer:[ \t]*(.*)$", re.M)


class ScriptedJudge(TextReplyModel):
    """Replies `True`/`False` to the judge prompt by exact match of the prediction against the gold list."""

    def __init__(self, name: str = "scripted-judge", separator: str = "; "):
        self.name = name
        self.separator = separator

    def reply(self, messages: list[Message]) -> str:
        text = "\n".join(content_text(m.get("content")) for m in messages if m.get("role") == "user")
        gold, pred = _GOLD.search(text), _PRED.search(text)
        if gold is None or pred is None:
            return "False"
        golds = [g.strip() for g in gold.group(1).split(self.separator) if g.strip()]
        return "True" if exact_match(pred.group(1).strip(), golds) else "False"

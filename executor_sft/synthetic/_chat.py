"""Shared plumbing of the scripted policies: reading conversations and wrapping replies."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from executor_sft.llm.base import ChatResult, SamplingParams
from executor_sft.schema import Message, TokenUsage, content_text

_DOC_LINE = re.compile(r"^Doc \d+ \(Title: (?P<title>.*?)\) (?P<text>.*)$")
_INFO = re.compile(r"<information>(.*?)</information>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


@dataclass(frozen=True)
class SeenPassage:
    title: str
    text: str


def approx_tokens(obj: Any) -> int:
    """A rough token count (4 characters a token) so usage accounting has numbers to add."""
    return max(1, len(json.dumps(obj, ensure_ascii=False)) // 4)


def result(message: Message, request: list[Message], model: str) -> ChatResult:
    usage = TokenUsage(prompt_tokens=approx_tokens(request), completion_tokens=approx_tokens(message))
    return ChatResult(message=message, usage=usage, latency_s=0.0, model=model)


class TextReplyModel:
    """A scripted `ChatModel` whose whole reply is the text `reply(messages)`: one `chat` for such roles."""

    name: str

    def reply(self, messages: list[Message]) -> str:
        raise NotImplementedError

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> ChatResult:
        return result({"role": "assistant", "content": self.reply(messages)}, messages, self.name)


def first_user(messages: list[Message]) -> str:
    return next((content_text(m.get("content")) for m in messages if m.get("role") == "user"), "")


def parse_passages(block: str) -> list[SeenPassage]:
    """Passages in a search result formatted as `Doc i (Title: T) text`, one per line."""
    out = []
    for line in block.splitlines():
        m = _DOC_LINE.match(line.strip())
        if m:
            out.append(SeenPassage(m.group("title"), m.group("text")))
    return out


def info_blocks(text: str) -> list[str]:
    return _INFO.findall(text)


def outside_info(text: str) -> str:
    """What a user message says besides its <information> blocks (a runtime notice, if any)."""
    return _INFO.sub("", text).strip()


def answers_in(text: str) -> list[str]:
    return [a.strip() for a in _ANSWER.findall(text)]


def answers_after(text: str, anchors: list[str]) -> list[str | None]:
    """For each anchor (a sub-query, in order), the first <answer> between it and the next anchor."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for anchor in anchors:
        i = text.find(anchor, pos)
        if i < 0:
            spans.append((-1, -1))
            continue
        spans.append((i, i + len(anchor)))
        pos = i + len(anchor)
    out: list[str | None] = []
    for j, (start, end) in enumerate(spans):
        if start < 0:
            out.append(None)
            continue
        nxt = next((s for s, _ in spans[j + 1 :] if s >= 0), len(text))
        found = answers_in(text[end:nxt])
        out.append(found[0] if found else None)
    return out


def unit_draw(*parts: object) -> float:
    """A reproducible number in [0, 1) from the parts (no dependence on Python's hash seed)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64

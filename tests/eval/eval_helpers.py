"""Scripted, request-driven policies for eval tests (a ModelPool factory maps `scripted:<policy>` to them)."""

from __future__ import annotations

import re

from executor_sft.llm.config import ChatModelConfig
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def _first_user(messages) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def _backbone(width: int):
    """Dispatch `width` (1 or 2) distinct sub-queries about the question in round 0, then stop."""

    def reply(messages, tools):
        if any(m["role"] == "assistant" for m in messages):
            return "<stop/>"
        question = _first_user(messages).removeprefix("Question: ").strip()
        prefixes = ["", "Background facts for: "][:width]
        return "".join(f"<subquery>{p}{question}</subquery>" for p in prefixes)

    return reply


def picky(question: str) -> bool:
    """Whether the `bb-picky` backbone answers this question without any sub-query."""
    return len(question) % 3 == 0


def _picky_backbone(messages, tools):
    """Like `bb-narrow`, but stops at once (no sub-query) for the questions `picky` selects."""
    question = _first_user(messages).removeprefix("Question: ").strip()
    if picky(question):
        return "<stop/>"
    return _backbone(1)(messages, tools)


def _executor(searches: int, gold: dict[str, str]):
    """Search `searches` times with the sub-query, then report the gold answer if it searched twice."""

    def reply(messages, tools):
        done = sum(1 for m in messages if m["role"] == "tool")
        query = _first_user(messages)
        if done < searches and tools:
            return assistant(tool_calls=[tool_call("search", {"query": query}, call_id=f"c{done}")])
        known = [a for q, a in gold.items() if q in query]
        answer = known[0] if known and done >= 2 else "unknown"
        return f"<answer>{answer}</answer><evidence>Doc 1</evidence>"

    return reply


def _answerer(messages, tools):
    """Answer with the first report's answer."""
    found = ANSWER.findall(_first_user(messages))
    return f"<answer>{found[0] if found else 'unknown'}</answer>"


def _both_roles(backbone, executor):
    """One model in either role, as a paper table uses it: an executor when tools are offered."""

    def reply(messages, tools):
        return executor(messages, tools) if tools else backbone(messages, tools)

    return reply


def scripted_factory(gold: dict[str, str], built: list[str]):
    """A ModelPool factory: `scripted:<policy>` configs become request-driven doubles."""

    def factory(cfg: ChatModelConfig):
        built.append(cfg.model)
        kind = cfg.model.removeprefix("scripted:")
        policies = {
            "bb-narrow": _backbone(1),
            "bb-wide": _backbone(2),
            "bb-picky": _picky_backbone,
            "ex-quick": _executor(1, gold),
            "ex-thorough": _executor(2, gold),
            "agent": _executor(2, gold),
            "both": _both_roles(_backbone(2), _executor(2, gold)),
            "answerer": _answerer,
            "judge": lambda messages, tools: "False" if "unknown" in _first_user(messages) else "True",
        }
        if kind not in policies:
            raise AssertionError(f"unexpected model {cfg.model}")
        return ScriptedChatModel(name=cfg.model, default=policies[kind])

    return factory


def scripted(name: str) -> dict:
    return {"backend": "openai", "model": f"scripted:{name}"}

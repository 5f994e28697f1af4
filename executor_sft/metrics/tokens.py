"""Token and search accounting for executor (sub-agent) runs.

Sub-agent tokens per question = the sum of the executor calls' prompt+completion tokens as
the endpoint reported them. Where a run reports none (an endpoint without `usage`), the
tokens are counted from the recorded messages with a tokenizer (its chat template when it
has one, else content tokens plus a ChatML-sized overhead per message); without a tokenizer
the count falls back to ~4 characters per token, with a warning, so a number always exists.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from executor_sft.schema import Episode, ExecutorRun, Message, Role

logger = logging.getLogger(__name__)

TokenCounter = Callable[[str], int]
MESSAGE_OVERHEAD_TOKENS = 5
"""`<|im_start|>role\\n ... <|im_end|>\\n` around each message in ChatML-style templates."""
DEFAULT_DRIVER_ROLE = Role.TEACHER
_warned_no_tokenizer = False


def driver_role(episode: Episode) -> str:
    """The role whose reports the backbone and answerer saw (the system's own executor).

    Read from the episode config (`driver` or `driver_role`); an episode with runs of one role
    only is driven by that role; otherwise the documented default `teacher`.
    """
    for key in ("driver", "driver_role"):
        value = episode.config.get(key)
        if isinstance(value, str) and value:
            return value
    roles = {r.role for r in episode.runs if r.counterfactual_of is None}
    if len(roles) == 1:
        return next(iter(roles))
    return DEFAULT_DRIVER_ROLE


def system_runs(episode: Episode, roles: Sequence[str] | None = None) -> list[ExecutorRun]:
    """The runs the deployed system consumed: the driver role's, minus counterfactual re-runs."""
    wanted = [driver_role(episode)] if roles is None else list(roles)
    return [r for r in episode.runs if r.role in wanted and r.counterfactual_of is None]


def _as_counter(tokenizer: Any | None) -> TokenCounter:
    if tokenizer is None:
        global _warned_no_tokenizer
        if not _warned_no_tokenizer:
            logger.warning(
                "no token usage reported and no tokenizer given: estimating 4 characters per token"
            )
            _warned_no_tokenizer = True
        return lambda text: (len(text) + 3) // 4
    if callable(tokenizer) and not hasattr(tokenizer, "encode"):
        return tokenizer
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def _message_text(message: Message) -> str:
    parts = [str(message.get("content") or "")]
    if message.get("reasoning_content"):
        parts.append(str(message["reasoning_content"]))
    if message.get("tool_calls"):
        parts.append(json.dumps([c.get("function", c) for c in message["tool_calls"]], ensure_ascii=False))
    return "\n".join(p for p in parts if p)


def count_message_tokens(messages: Sequence[Message], tokenizer: Any | None = None) -> int:
    """Tokens of a message list: the tokenizer's chat template when it can render them."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        try:
            ids = tokenizer.apply_chat_template(list(messages), tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return len(ids)
        except Exception:  # a template that rejects these messages: count contents instead
            pass
    count = _as_counter(tokenizer)
    return sum(count(_message_text(m)) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def _assistant_positions(run: ExecutorRun) -> list[int]:
    return [i for i, m in enumerate(run.messages) if m.get("role") == "assistant"]


def _recorded_call_usages(run: ExecutorRun) -> list[int] | None:
    """Per-call totals when the runtime recorded them (a `calls` list or usage on each turn)."""
    calls = run.calls
    if isinstance(calls, list) and calls and all(isinstance(c, dict) and "usage" in c for c in calls):
        return [
            int(c["usage"].get("prompt_tokens", 0)) + int(c["usage"].get("completion_tokens", 0))
            for c in calls
        ]
    turns = [run.messages[i] for i in _assistant_positions(run)]
    if turns and all(isinstance(m.get("usage"), dict) for m in turns):
        return [
            int(m["usage"].get("prompt_tokens", 0)) + int(m["usage"].get("completion_tokens", 0))
            for m in turns
        ]
    return None


def _counted_call_usages(run: ExecutorRun, tokenizer: Any | None) -> list[int]:
    """Per-call prompt+completion tokens counted from the messages (prompt = all before the turn)."""
    out = []
    for pos in _assistant_positions(run):
        prompt = count_message_tokens(run.messages[:pos], tokenizer)
        completion = count_message_tokens(run.messages[pos : pos + 1], tokenizer)
        out.append(prompt + completion)
    return out


def call_usages(run: ExecutorRun, tokenizer: Any | None = None) -> list[int]:
    """Prompt+completion tokens of each executor call of a run, in call order.

    Uses per-call usage when recorded. Otherwise the run's reported total is split over its
    calls in proportion to their counted sizes (exact total, estimated split); with no
    reported total either, the counted sizes themselves.
    """
    recorded = _recorded_call_usages(run)
    if recorded is not None:
        return recorded
    total = run.usage.prompt_tokens + run.usage.completion_tokens
    if total > 0:
        estimates = _counted_call_usages(run, tokenizer) if tokenizer is not None else _char_estimates(run)
        if not estimates:
            return [total]
        scale = total / sum(estimates)
        shares = [int(e * scale) for e in estimates]
        shares[-1] += total - sum(shares)  # keep the reported total exact
        return shares
    return _counted_call_usages(run, tokenizer)


def _char_estimates(run: ExecutorRun) -> list[int]:
    out = []
    for pos in _assistant_positions(run):
        chars = sum(len(_message_text(m)) for m in run.messages[: pos + 1])
        out.append(chars + 1)
    return out


def run_tokens(run: ExecutorRun, tokenizer: Any | None = None) -> int:
    """A run's prompt+completion tokens: reported usage, else counted from its messages."""
    total = run.usage.prompt_tokens + run.usage.completion_tokens
    if total > 0 or not run.messages:
        return total
    return sum(call_usages(run, tokenizer))


def subagent_tokens(
    episode: Episode, roles: Sequence[str] | None = None, tokenizer: Any | None = None
) -> int:
    """Sub-agent tokens of one episode: the driver role's executor runs (or `roles`)."""
    return sum(run_tokens(r, tokenizer) for r in system_runs(episode, roles))


def search_turns(run: ExecutorRun) -> list[int]:
    """For each search of the run, the index (among assistant turns) of the turn that issued it.

    Native protocol: a turn with `tool_calls` (one search per call). Tag protocol: a turn
    whose content holds `<search>`. Used to place a search on the token timeline.
    """
    out: list[int] = []
    for turn, pos in enumerate(_assistant_positions(run)):
        msg = run.messages[pos]
        calls = msg.get("tool_calls") or []
        if calls:
            out.extend([turn] * len(calls))
        elif "<search>" in str(msg.get("content") or ""):
            out.extend([turn] * str(msg["content"]).count("<search>"))
    return out[: len(run.searches)] if len(out) >= len(run.searches) else out


@dataclass(frozen=True)
class SearchHistogram:
    """Executor invocations by number of searches (the paper's "1 vs >=2")."""

    zero: int = 0
    one: int = 0
    two_plus: int = 0

    @property
    def total(self) -> int:
        return self.zero + self.one + self.two_plus

    def by_label(self) -> dict[str, int]:
        """Invocations under their labels "0", "1", ">=2": the one mapping `fractions` and `as_dict` use."""
        return {"0": self.zero, "1": self.one, ">=2": self.two_plus}

    def fractions(self) -> dict[str, float]:
        n = self.total or 1
        return {label: count / n for label, count in self.by_label().items()}

    def as_dict(self) -> dict[str, Any]:
        return {**self.by_label(), "invocations": self.total, "fractions": self.fractions()}


def search_histogram(runs: Iterable[ExecutorRun]) -> SearchHistogram:
    counts = [0, 0, 0]
    for run in runs:
        n = run.n_searches if run.n_searches else len(run.searches)
        counts[min(n, 2)] += 1
    return SearchHistogram(*counts)

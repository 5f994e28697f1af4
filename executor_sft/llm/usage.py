"""Token usage when an endpoint reports none: count with a tokenizer, else estimate (and say so)."""

from __future__ import annotations

import json
from typing import Any

from executor_sft.schema import Message, TokenUsage


def completion_text(message: Message) -> str:
    """The text a model wrote for a message: reasoning, content and tool calls."""
    parts = [message.get("reasoning_content") or "", message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(
            json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")}, ensure_ascii=False)
        )
    return "\n".join(p for p in parts if p)


def estimate_tokens(text: str) -> int:
    """About 4 characters per token for English BPE vocabularies; at least 1 for non-empty text."""
    return (len(text) + 3) // 4


def count_usage(
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    response: Message,
    tokenizer: Any | None = None,
) -> TokenUsage:
    """Prompt and completion tokens of one call, `counted_by` "tokenizer" or "estimate"."""
    if tokenizer is not None:
        try:
            prompt = tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=True
            )
            if isinstance(prompt, dict) or hasattr(prompt, "keys"):
                prompt = prompt["input_ids"]
            completion = tokenizer.encode(completion_text(response), add_special_tokens=False)
            return TokenUsage(
                prompt_tokens=len(prompt), completion_tokens=len(completion), counted_by="tokenizer"
            )
        except Exception:  # a template that cannot render these messages: fall back to the estimate
            pass
    prompt_text = json.dumps(messages, ensure_ascii=False) + (json.dumps(tools) if tools else "")
    return TokenUsage(
        prompt_tokens=estimate_tokens(prompt_text),
        completion_tokens=estimate_tokens(completion_text(response)),
        counted_by="estimate",
    )

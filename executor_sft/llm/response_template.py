"""How an executor's reply text parses back into a message: the tokenizer's `response_template`.

TRL's trainers that run tools (GRPO, on-policy distillation) parse every sampled turn with
`tokenizer.parse_response`, which needs a `response_template` (a transformers spec of the
assistant turn's fields). TRL fills one in only for chat templates it ships; the templates this
project saves with its executors (`chatml_tools.jinja`, `qwen3_executor.jinja`) are not among
them, so their tokenizers carry this spec. transformers writes it into `tokenizer_config.json`,
so a saved checkpoint keeps it.

Both templates render an assistant turn as optional `<think>...</think>`, then content, then
`<tool_call>{json}</tool_call>` blocks (with or without newlines inside), then `<|im_end|>`.
"""

from __future__ import annotations

from typing import Any

from executor_sft.llm.offline import chatml_tools_template, qwen3_executor_template

EXECUTOR_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close_pattern": r"</think>\s*", "content": "text"},
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def is_executor_template(chat_template: Any) -> bool:
    """True for a chat template this project writes (the ones `EXECUTOR_RESPONSE_TEMPLATE` parses)."""
    return isinstance(chat_template, str) and chat_template in (
        chatml_tools_template(),
        qwen3_executor_template(),
    )


def ensure_response_template(tokenizer: Any) -> Any:
    """Give a tokenizer with one of this project's chat templates the spec that parses its replies.

    A tokenizer that already has a `response_template`, or carries another chat template
    (TRL recognises the ones it ships), is left as it is. Returns the tokenizer.
    """
    if getattr(tokenizer, "response_template", None) is None and is_executor_template(
        tokenizer.chat_template
    ):
        tokenizer.response_template = EXECUTOR_RESPONSE_TEMPLATE
    return tokenizer

"""Chat model backends behind one async interface (`ChatModel.chat`).

Heavy backends import lazily: `from executor_sft.llm import OpenAIChatModel` does not load
torch, and `VLLMChatModel` needs the `gpu` extra. Each backend has its own config class,
registered with its builder in `BACKENDS` (`executor_sft.llm.config`).
"""

from __future__ import annotations

from typing import Any

from executor_sft.llm.backends import OpenAIConfig, OracleConfig, TransformersConfig, VLLMConfig
from executor_sft.llm.base import ChatError, ChatModel, ChatRefused, ChatResult, SamplingParams
from executor_sft.llm.config import BACKENDS, Backend, ChatModelConfig, build_chat_model
from executor_sft.llm.parsing import ParsedResponse, parse_assistant_text, tool_call_error
from executor_sft.llm.pool import ModelPool

_LAZY = {
    "OpenAIChatModel": "executor_sft.llm.openai_backend",
    "TransformersChatModel": "executor_sft.llm.transformers_backend",
    "VLLMChatModel": "executor_sft.llm.vllm_backend",
}

__all__ = [
    "BACKENDS",
    "Backend",
    "ChatError",
    "ChatRefused",
    "ChatModel",
    "ChatResult",
    "ChatModelConfig",
    "ModelPool",
    "OpenAIChatModel",
    "OpenAIConfig",
    "OracleConfig",
    "ParsedResponse",
    "SamplingParams",
    "TransformersChatModel",
    "TransformersConfig",
    "VLLMChatModel",
    "VLLMConfig",
    "build_chat_model",
    "parse_assistant_text",
    "tool_call_error",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'executor_sft.llm' has no attribute {name!r}")

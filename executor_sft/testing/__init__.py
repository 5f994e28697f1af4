"""Offline models and data paths shared by the tests, benchmarks and the embedded default."""

from executor_sft.testing.models import (
    QWEN3_SPECIAL_TOKENS,
    cache_dir,
    chatml_tools_template,
    qwen3_tokenizer,
    smollm2_instruct,
    tiny_qwen3,
    tiny_qwen3_tokenizer,
    trl_chat_template,
)
from executor_sft.testing.paths import (
    minibench_corpus,
    minibench_dir,
    minibench_questions,
    seed_splits_dir,
    shared_dir,
)

__all__ = [
    "QWEN3_SPECIAL_TOKENS",
    "cache_dir",
    "chatml_tools_template",
    "minibench_corpus",
    "minibench_dir",
    "minibench_questions",
    "qwen3_tokenizer",
    "seed_splits_dir",
    "shared_dir",
    "smollm2_instruct",
    "tiny_qwen3",
    "tiny_qwen3_tokenizer",
    "trl_chat_template",
]

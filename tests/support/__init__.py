"""Test support: shared-data paths, model doubles, and the offline models re-exported for tests."""

from executor_sft.cache import cache_dir
from executor_sft.llm.offline import (
    QWEN3_SPECIAL_TOKENS,
    chatml_tools_template,
    qwen3_tokenizer,
    smollm2_instruct,
    tiny_qwen3,
    tiny_qwen3_tokenizer,
    trl_chat_template,
)
from tests.support.paths import (
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

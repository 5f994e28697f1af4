"""On-policy distillation of the executor with the search tool (TRL's DistillationTrainer)."""

from executor_sft.distill.tokenizers import (
    TokenizerMismatchError,
    check_same_tokenizer,
    vocabulary_fingerprint,
)
from executor_sft.distill.train import (
    DistillScriptArguments,
    ExecutorDistillationTrainer,
    build_distill_trainer,
    run_distill,
)

__all__ = [
    "DistillScriptArguments",
    "ExecutorDistillationTrainer",
    "TokenizerMismatchError",
    "build_distill_trainer",
    "check_same_tokenizer",
    "run_distill",
    "vocabulary_fingerprint",
]

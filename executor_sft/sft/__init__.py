"""Passage-masked SFT of executors: rows -> masked tokens -> TRL SFTTrainer."""

from executor_sft.sft.data import DEFAULT_SFT_DATA, RowError, load_sft_rows, read_sft_jsonl, validate_row
from executor_sft.sft.length import LengthReport, RowTooLongError, fit_row
from executor_sft.sft.templates import is_qwen3_tokenizer, qwen3_training_template, training_chat_template
from executor_sft.sft.tokenize import IGNORE_INDEX, render_row, tokenize_example

__all__ = [
    "DEFAULT_SFT_DATA",
    "IGNORE_INDEX",
    "LengthReport",
    "RowError",
    "RowTooLongError",
    "fit_row",
    "is_qwen3_tokenizer",
    "load_sft_rows",
    "qwen3_training_template",
    "read_sft_jsonl",
    "render_row",
    "tokenize_example",
    "training_chat_template",
    "validate_row",
]

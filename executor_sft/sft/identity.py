"""SFT's run identity: the shared one (`training.identity`) plus what shapes SFT's learning."""

from __future__ import annotations

import hashlib
from typing import Any

from executor_sft.training.identity import as_recorded, base_identity, data_fingerprint, settings_of

SFT_TRAINING_FIELDS = ("max_length", "packing", "padding_free")
SFT_SCRIPT_FIELDS = ("enable_thinking", "overflow", "min_passage_tokens", "token_drift", "trainable_layers")


def run_identity(
    script_args, training_args, model_args, rows: list[dict[str, Any]], training_template: str | None
) -> dict[str, Any]:
    """The data and the settings that, changed mid-run, make a resumed run a different training."""
    return as_recorded(
        {
            **base_identity(training_args, model_args, data_fingerprint(rows)),
            **settings_of(training_args, SFT_TRAINING_FIELDS),
            **settings_of(script_args, SFT_SCRIPT_FIELDS),
            "training_chat_template": (
                hashlib.sha256(training_template.encode("utf-8")).hexdigest() if training_template else None
            ),
        }
    )

"""Tokens never reach disk: the Trainer pickles its arguments into every checkpoint and the model.

`training_args.bin` is `torch.save(args)`, so a `--hub_token` given on the command line would
sit in plain text in the output folder and be uploaded by a push. The hub token moves to the
process's `HF_TOKEN` (huggingface_hub reads it wherever the Trainer passes no token) and every
secret argument is cleared before the Trainer sees the arguments. A secret is a `*_token` field
that is not a vocabulary token (SFTConfig's `eos_token` and `pad_token` are the model's).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

HUB_TOKEN_FIELDS = ("hub_token", "push_to_hub_token")
VOCABULARY_TOKEN_FIELDS = frozenset({"eos_token", "pad_token", "bos_token", "unk_token"})


def keep_tokens_off_disk(args: Any) -> list[str]:
    """Clear every string `*_token` field of a dataclass of arguments, in place; the hub token
    goes to `HF_TOKEN` in this process's environment. Returns the names cleared."""
    cleared = []
    for f in dataclasses.fields(args):
        value = getattr(args, f.name, None)
        secret = f.name.endswith("_token") and f.name not in VOCABULARY_TOKEN_FIELDS
        if not secret or not isinstance(value, str) or not value:
            continue
        if f.name in HUB_TOKEN_FIELDS:
            os.environ["HF_TOKEN"] = value
        setattr(args, f.name, None)
        cleared.append(f.name)
    return cleared

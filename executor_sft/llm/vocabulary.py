"""Which vocabulary token ids belong to: one fingerprint for distillation and token fidelity.

Ids mean something only under the tokenizer that made them. Tokenizers of one family (Qwen3
0.6B to 32B, SmolLM2 135M to 1.7B) share the table, so they share the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from typing import Any

_IDS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def vocabulary_fingerprint(tokenizer: Any) -> tuple[int, str]:
    """(size, sha256 of the token -> id table, added tokens included)."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode("utf-8")).hexdigest()
    return len(vocab), digest


def vocabulary_id(tokenizer: Any) -> str:
    """`<size>-<first 16 hex digits of the fingerprint>`, computed once per tokenizer object."""
    try:
        return _IDS[tokenizer]
    except (KeyError, TypeError):
        pass
    size, digest = vocabulary_fingerprint(tokenizer)
    text = f"{size}-{digest[:16]}"
    try:
        _IDS[tokenizer] = text
    except TypeError:  # not weak-referenceable: computed again next time
        pass
    return text

"""Evaluation-set id lists; they live in `executor_sft.data.idlist` (question selection reads them)."""

from executor_sft.data.idlist import ids_digest, read_ids

__all__ = ["ids_digest", "read_ids"]

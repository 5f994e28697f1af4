"""SQuAD-style answer normalisation, exact match and token F1 over gold aliases."""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—", "…", "«", "»"}
_SPECIAL = {"yes", "no", "noanswer"}
_CACHED_LEN = 256
"""Texts up to this length are memoised (answers and gold aliases repeat across an episode's runs)."""


class _PunctDeletion(dict):
    """`str.translate` table: punctuation code points map to None (deleted), others to themselves.

    Filled lazily, one `unicodedata.category` look-up per distinct code point ever seen,
    instead of one per character per call.
    """

    def __missing__(self, code: int) -> int | None:
        ch = chr(code)
        kept = None if ch in _PUNCT or unicodedata.category(ch).startswith("P") else code
        self[code] = kept
        return kept


_DROP_PUNCT = _PunctDeletion()


def normalize_answer(text: str | None) -> str:
    """Lowercase, NFKC-fold unicode, drop punctuation and English articles, collapse whitespace."""
    if not text:
        return ""
    if type(text) is not str:
        text = str(text)
    return _normalize_cached(text) if len(text) <= _CACHED_LEN else _normalize(text)


def _normalize(text: str) -> str:
    if not text.isascii():  # NFKC leaves ASCII unchanged
        text = unicodedata.normalize("NFKC", text)
    text = text.lower().translate(_DROP_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


_normalize_cached = lru_cache(maxsize=1 << 16)(_normalize)


def _aliases(golden_answers: str | Iterable[str]) -> list[str]:
    if isinstance(golden_answers, str):
        return [golden_answers]
    return [g for g in golden_answers if g is not None]


def exact_match(prediction: str | None, golden_answers: str | Iterable[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _aliases(golden_answers)))


def _f1_single(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    # yes/no/noanswer are categorical: partial token overlap with them means nothing.
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0
    pred_toks, ref_toks = pred.split(), ref.split()
    common = Counter(pred_toks) & Counter(ref_toks)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_toks)
    recall = overlap / len(ref_toks)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, golden_answers: str | Iterable[str]) -> float:
    aliases = _aliases(golden_answers)
    if not aliases:
        return 0.0
    return max(_f1_single(prediction or "", g) for g in aliases)

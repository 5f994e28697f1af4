"""Answer normalisation, exact match, cover-EM and token F1 over gold aliases.

Two normalisations, selected by name:
- `"squad"` (default): the SQuAD v1.1 evaluation script's `normalize_answer`, which Search-R1
  and FlashRAG use, so our numbers compare with theirs: lower-case, delete every character of
  `string.punctuation`, replace the words a / an / the (regex `\\b(a|an|the)\\b`) by a space,
  collapse whitespace. Non-ASCII punctuation ("–", "“", "¿") and full-width text stay.
- `"unicode"`: NFKC-fold, lower-case, delete all Unicode punctuation (categories P*) and
  curly quotes / dashes, then the same article and whitespace steps. Not comparable with
  published SQuAD-style numbers; kept for corpora where those characters are noise.

Rules beyond the plain string comparison (each one documented in docs/eval.md):
- Empty aliases: a gold alias that normalises to "" (e.g. "A", "The") is compared with its
  articles kept (lower-case, punctuation deleted, whitespace collapsed), so an empty
  prediction never matches it; an alias empty even then matches nothing.
- F1 (HotpotQA's official rule): when either side normalises to yes / no / noanswer and the
  two differ, F1 is 0, because partial token overlap with a categorical answer means nothing.
- Cover-EM: a normalised alias occurs inside the normalised prediction (a substring, as
  FlashRAG's sub-EM); an alias that needed the empty-alias rule must occur as whole words.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from typing import Literal

Normalization = Literal["squad", "unicode"]
NORMALIZATIONS: tuple[str, ...] = ("squad", "unicode")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SQUAD_PUNCT = str.maketrans("", "", string.punctuation)
_EXTRA_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—", "…", "«", "»"}
_SPECIAL = {"yes", "no", "noanswer"}
_CACHED_LEN = 256
"""Texts up to this length are memoised (answers and gold aliases repeat across an episode's runs)."""


class _PunctDeletion(dict):
    """`str.translate` table for the unicode variant: punctuation code points map to None.

    Filled lazily, one `unicodedata.category` look-up per distinct code point ever seen,
    instead of one per character per call.
    """

    def __missing__(self, code: int) -> int | None:
        ch = chr(code)
        kept = None if ch in _EXTRA_PUNCT or unicodedata.category(ch).startswith("P") else code
        self[code] = kept
        return kept


_UNICODE_PUNCT = _PunctDeletion()


def _normalize(text: str, normalization: str, articles: bool) -> str:
    if normalization == "squad":
        text = text.lower().translate(_SQUAD_PUNCT)
    elif normalization == "unicode":
        if not text.isascii():  # NFKC leaves ASCII unchanged
            text = unicodedata.normalize("NFKC", text)
        text = text.lower().translate(_UNICODE_PUNCT)
    else:
        raise ValueError(f"unknown normalization {normalization!r}; expected one of {NORMALIZATIONS}")
    if articles:
        text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


_normalize_cached = lru_cache(maxsize=1 << 16)(_normalize)


def _norm(text: str | None, normalization: str, articles: bool = True) -> str:
    if not text:
        return ""
    if type(text) is not str:
        text = str(text)
    if len(text) <= _CACHED_LEN:
        return _normalize_cached(text, normalization, articles)
    return _normalize(text, normalization, articles)


def normalize_answer(text: str | None, normalization: Normalization = "squad") -> str:
    """Normalise an answer for comparison (SQuAD v1.1 by default; see the module docstring)."""
    return _norm(text, normalization)


def _aliases(golden_answers: str | Iterable[str]) -> list[str]:
    if isinstance(golden_answers, str):
        return [golden_answers]
    return [g for g in golden_answers if g is not None]


def _forms(prediction: str | None, gold: str, normalization: str) -> tuple[str, str, bool] | None:
    """(prediction, gold, articles kept) as compared, or None when the alias is empty even with articles."""
    ref = _norm(gold, normalization)
    if ref:
        return _norm(prediction, normalization), ref, False
    ref = _norm(gold, normalization, articles=False)
    if not ref:
        return None
    return _norm(prediction, normalization, articles=False), ref, True


def exact_match(
    prediction: str | None, golden_answers: str | Iterable[str], normalization: Normalization = "squad"
) -> float:
    """1.0 when the normalised prediction equals a normalised gold alias."""
    for gold in _aliases(golden_answers):
        forms = _forms(prediction, gold, normalization)
        if forms is not None and forms[0] == forms[1]:
            return 1.0
    return 0.0


def cover_exact_match(
    prediction: str | None, golden_answers: str | Iterable[str], normalization: Normalization = "squad"
) -> float:
    """Cover-EM (sub-EM): 1.0 when a normalised gold alias occurs inside the normalised prediction."""
    for gold in _aliases(golden_answers):
        forms = _forms(prediction, gold, normalization)
        if forms is None:
            continue
        pred, ref, whole_words = forms
        if (f" {ref} " in f" {pred} ") if whole_words else (ref in pred):
            return 1.0
    return 0.0


def _f1_single(prediction: str | None, gold: str, normalization: str) -> float:
    forms = _forms(prediction, gold, normalization)
    if forms is None:
        return 0.0
    pred, ref, _ = forms
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0
    pred_toks, ref_toks = pred.split(), ref.split()
    overlap = sum((Counter(pred_toks) & Counter(ref_toks)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_toks)
    recall = overlap / len(ref_toks)
    return 2 * precision * recall / (precision + recall)


def f1_score(
    prediction: str | None, golden_answers: str | Iterable[str], normalization: Normalization = "squad"
) -> float:
    """Token F1, the maximum over gold aliases (0 without aliases)."""
    aliases = _aliases(golden_answers)
    if not aliases:
        return 0.0
    return max(_f1_single(prediction, g, normalization) for g in aliases)

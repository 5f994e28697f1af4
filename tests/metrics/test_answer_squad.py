"""SQuAD v1.1 normalisation (the default) against an independent implementation of the published algorithm."""

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor_sft.metrics import cover_exact_match, exact_match, f1_score, normalize_answer


def _squad_reference(s):
    """The published steps, written out one by one: lower, punctuation, articles, whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


@pytest.mark.parametrize(
    ("raw", "squad", "unicode"),
    [
        ("1990–1995", "1990–1995", "19901995"),  # SQuAD keeps the en dash
        ("“Rush”", "“rush”", "rush"),
        ("Ｒｕｓｈ", "ｒｕｓｈ", "rush"),
        ("¿Qué?", "¿qué", "qué"),
        ("The U.S.A.!", "usa", "usa"),
        ("A Tale of Two Cities", "tale of two cities", "tale of two cities"),
        ("rock'n'roll", "rocknroll", "rocknroll"),
    ],
)
def test_squad_is_the_default_and_unicode_is_named(raw, squad, unicode):
    assert normalize_answer(raw) == squad == _squad_reference(raw)
    assert normalize_answer(raw, "squad") == squad
    assert normalize_answer(raw, "unicode") == unicode


def test_examples_change_em_between_normalisations():
    assert exact_match("1990-1995", ["1990–1995"]) == 0.0
    assert exact_match("1990-1995", ["1990–1995"], "unicode") == 1.0
    assert exact_match("Rush", ["“Rush”"]) == 0.0
    assert exact_match("Rush", ["“Rush”"], "unicode") == 1.0


_TRICKY = st.sampled_from(
    list(string.printable)
    + [" the ", " a ", " an ", "The", "AN", "ß", "İ", "ﬁ", "Ａ", "½", "é", "e\u0301", "“", "’", "«", "—", "–"]
    + ["\u00a0", "\u2003", "\u2028", "\x1c", "\u3001", "\u00bf", "¿Qué?", "\U0001f600", "\u212a", "ǅ"]
)


@settings(max_examples=500)
@given(st.one_of(st.text(), st.lists(_TRICKY, max_size=40).map("".join), st.text(min_size=250, max_size=320)))
def test_squad_normalisation_equals_reference(text):
    assert normalize_answer(text) == _squad_reference(text)
    assert normalize_answer(text) == _squad_reference(text)  # second call: cached for short texts


@pytest.mark.parametrize("gold", ["A", "The", "an", "a."])
def test_gold_alias_empty_after_normalisation_never_matches_an_empty_prediction(gold):
    for empty in ("", None, "  ", "?!"):
        assert exact_match(empty, [gold]) == 0.0
        assert cover_exact_match(empty, [gold]) == 0.0
        assert f1_score(empty, [gold]) == 0.0
    # Compared with the articles kept, the alias still matches itself.
    assert exact_match(gold.upper(), [gold]) == 1.0
    assert f1_score(gold, [gold]) == 1.0
    assert exact_match("the", ["A"]) == 0.0
    # Cover-EM of such an alias needs the whole word: "a" is not inside "paris".
    assert cover_exact_match("paris", ["A"]) == 0.0
    assert cover_exact_match("grade a", ["A"]) == 1.0


def test_alias_empty_even_with_articles_matches_nothing():
    assert exact_match("", ["?"]) == 0.0 and exact_match("?", ["?"]) == 0.0
    assert exact_match("Paris", ["?", "Paris"]) == 1.0


def test_cover_exact_match():
    assert cover_exact_match("It was Kurt Weill, in 1928.", ["Kurt Weill"]) == 1.0
    assert cover_exact_match("Weill", ["Kurt Weill"]) == 0.0
    assert cover_exact_match("The answer is Paris", ["London", "paris"]) == 1.0
    assert cover_exact_match(None, ["Paris"]) == 0.0
    assert cover_exact_match("Paris", "Paris") == 1.0


@given(st.text(max_size=30), st.lists(st.text(max_size=10), max_size=3))
def test_em_implies_cover_em(prediction, golds):
    if exact_match(prediction, golds):
        assert cover_exact_match(prediction, golds) == 1.0

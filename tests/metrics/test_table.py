"""table_scores against hand-computed values (the rules in executor_sft/metrics/table.py, which
follow WideSearch's evaluator; tests/metrics/test_table_widesearch.py checks them against a port)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor_sft.metrics import at_k, parse_markdown_table, render_markdown_table, table_scores

GOLD = """| Film | Year | Lead |
|---|---|---|
| Red Sky | 1990 | Ana Vel |
| Blue Hour | 1994 | Tom Ark |
| Grey Dawn | 2001 | Lio Pem |"""
KEY = ["Film"]


def _scores(prediction, gold=GOLD, key=KEY):
    s = table_scores(prediction, gold, key)
    return {
        name: round(getattr(s, name), 6)
        for name in (
            "item_precision",
            "item_recall",
            "item_f1",
            "row_precision",
            "row_recall",
            "row_f1",
            "success",
        )
    }


def _expect(ip, ir, if1, rp, rr, rf1, success):
    return {
        k: round(v, 6)
        for k, v in zip(
            ("item_precision", "item_recall", "item_f1", "row_precision", "row_recall", "row_f1", "success"),
            (ip, ir, if1, rp, rr, rf1, success),
            strict=True,
        )
    }


def test_permuted_rows_case_and_whitespace_score_perfect():
    prediction = """|film|year|  LEAD |
| :--- | ---: | --- |
|   grey dawn | 2001 |   lio   pem |
| RED SKY |  1990 | Ana Vel |
| Blue Hour | 1994 | tom ark |"""
    assert _scores(prediction) == _expect(1, 1, 1, 1, 1, 1, 1)


def test_missing_row():
    # 6 predicted cells, all right, of 9 gold: P 1, R 6/9, F1 0.8; rows 2 of 3 likewise.
    prediction = (
        "| Film | Year | Lead |\n|---|---|---|\n| Red Sky | 1990 | Ana Vel |\n| Blue Hour | 1994 | Tom Ark |"
    )
    assert _scores(prediction) == _expect(1, 2 / 3, 0.8, 1, 2 / 3, 0.8, 0)


def test_extra_row():
    # 12 predicted cells, 9 right: P 3/4, R 1, F1 6/7; rows 3 of 4 predicted, 3 of 3 gold.
    prediction = GOLD + "\n| Black Sea | 1988 | Ida Rom |"
    assert _scores(prediction) == _expect(0.75, 1, 6 / 7, 0.75, 1, 6 / 7, 0)


def test_missing_and_wrong_cells():
    # Items are rows x columns (a blank cell is an item): 9 predicted, 9 gold. Red Sky: 2 right
    # (its blank lead is wrong); Blue Hour: 2 right; Grey Dawn: 3. P = R = F1 = 7/9. Rows: only
    # Grey Dawn, 1/3.
    prediction = """| Film | Year | Lead |
|---|---|---|
| Red Sky | 1990 | |
| Blue Hour | 1995 | Tom Ark |
| Grey Dawn | 2001 | Lio Pem |"""
    assert _scores(prediction) == _expect(7 / 9, 7 / 9, 7 / 9, 1 / 3, 1 / 3, 1 / 3, 0)


def test_a_missing_or_extra_column_scores_zero():
    # WideSearch scores a table whose column set is not the gold's 0 (it first asks an LLM to
    # rename the columns; we don't: docs/wide.md, "Table metrics").
    missing = "| Film | Year |\n|---|---|\n| Red Sky | 1990 |\n| Blue Hour | 1994 |\n| Grey Dawn | 2001 |"
    assert _scores(missing) == _expect(0, 0, 0, 0, 0, 0, 0)
    extra = """Here is the table:

| lead | FILM | Notes | Year |
|---|---|---|---|
| Ana Vel | Red Sky | first | 1990 |
| Tom Ark | Blue Hour | | 1994 |
| Lio Pem | Grey Dawn | last | 2001 |"""
    assert _scores(extra) == _expect(0, 0, 0, 0, 0, 0, 0)


def test_repeated_key_first_row_wins():
    # The second Red Sky row is dropped (pandas' drop_duplicates keeps the first), so the table
    # is exactly the gold one.
    assert _scores(GOLD + "\n| Red Sky | 1991 | Ana Vel |") == _expect(1, 1, 1, 1, 1, 1, 1)
    # The wrong row first: it is the one kept.
    wrong_first = GOLD.replace("| Red Sky | 1990 |", "| Red Sky | 1991 | Ana Vel |\n| Red Sky | 1990 |")
    assert _scores(wrong_first) == _expect(8 / 9, 8 / 9, 8 / 9, 2 / 3, 2 / 3, 2 / 3, 0)


def test_columns_are_matched_by_header_in_any_order():
    prediction = """Here is the table:

| lead | FILM | Year |
|---|---|---|
| Ana Vel | Red Sky | 1990 |
| Tom Ark | Blue Hour | 1994 |
| Lio Pem | Grey Dawn | 2001 |

All three films are listed."""
    assert _scores(prediction) == _expect(1, 1, 1, 1, 1, 1, 1)


def test_articles_are_kept_and_numbers_parsed():
    gold = "| Grade | Count |\n|---|---|\n| A | 1,204 |\n| B | 198.9 |\n| The | 7 |"
    assert _scores(gold, gold, ["Grade"]) == _expect(1, 1, 1, 1, 1, 1, 1)
    pred = "| Grade | Count |\n|---|---|\n| a | 1204.0 |\n| B | 1989 |\n| the | about 7 |"
    # 1204.0 is 1,204 and "about 7" is 7; 1989 is not 198.9.
    assert _scores(pred, gold, ["Grade"]) == _expect(5 / 6, 5 / 6, 5 / 6, 2 / 3, 2 / 3, 2 / 3, 0)


def test_without_the_key_column_no_row_aligns():
    prediction = "| Film | Year | Lead |\n|---|---|---|\n| | 1990 | Ana Vel |"
    assert _scores(prediction) == _expect(0, 0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("prediction", [None, "", "I could not find the films.", "Red Sky, 1990, Ana Vel"])
def test_no_table_scores_zero(prediction):
    assert _scores(prediction) == _expect(0, 0, 0, 0, 0, 0, 0)


CITIES = "| City | Country | Population |\n|---|---|---|\n| Orla | Dresk | 1,200 |\n| Orla | Vemm | 300 |"


def test_two_column_key_and_number_formatting():
    both = "| City | Country | Population |\n|---|---|---|\n| Orla | Vemm | 300 |\n| orla | dresk | 1200 |"
    assert _scores(both, CITIES, ["City", "Country"]) == _expect(1, 1, 1, 1, 1, 1, 1)
    # Aligned to Orla (Dresk) by both key cells, with Vemm's population: 2 of 3 cells right, 6 gold.
    wrong = "| City | Country | Population |\n|---|---|---|\n| Orla | Dresk | 300 |"
    assert _scores(wrong, CITIES, ["City", "Country"]) == _expect(2 / 3, 1 / 3, 4 / 9, 0, 0, 0, 0)


def test_bad_gold_is_a_data_error():
    with pytest.raises(ValueError, match="unique_columns"):
        table_scores(GOLD, GOLD, ["Title"])
    with pytest.raises(ValueError, match="repeats the key"):
        table_scores(CITIES, CITIES, ["City"])
    with pytest.raises(ValueError, match="not a Markdown table"):
        table_scores(GOLD, "no table", KEY)


def test_parse_reads_the_first_table_and_pads_short_rows():
    table = parse_markdown_table("intro\n| a | b |\n|---|---|\n| 1 |\n\n| c |\n|---|\n| 2 |")
    assert table.header == ["a", "b"] and table.rows == [["1", ""]]


def test_avg_max_pass_at_k():
    # q1 samples 0.5 and 1.0, q2 0.0 and 0.2: Avg@2 = (0.75 + 0.1) / 2, Max@2 = (1.0 + 0.2) / 2, Pass@2 = 1/2.
    result = at_k([("q1", 0.5), ("q2", 0.0), ("q1", 1.0), ("q2", 0.2)])
    assert (round(result.avg, 6), round(result.max, 6), result.pass_, result.k, result.n_questions) == (
        0.425,
        0.6,
        0.5,
        2,
        2,
    )
    assert at_k([]).n_questions == 0


_cell = st.text(alphabet="bcdefgh ", min_size=1, max_size=6).filter(lambda s: s.strip())


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(_cell, _cell), min_size=1, max_size=6, unique_by=lambda r: r[0].replace(" ", "")),
    seed=st.randoms(use_true_random=False),
    drop=st.integers(min_value=0, max_value=5),
)
def test_row_order_never_changes_the_scores(rows, seed, drop):
    gold = render_markdown_table(["Name", "Value"], rows)
    kept = rows[: max(1, len(rows) - drop)]
    shuffled = list(kept)
    seed.shuffle(shuffled)
    in_order = table_scores(render_markdown_table(["Name", "Value"], kept), gold, ["Name"])
    assert table_scores(render_markdown_table(["name", "value"], shuffled), gold, ["Name"]) == in_order
    assert in_order.item_precision == 1.0 and in_order.success == (1.0 if len(kept) == len(rows) else 0.0)

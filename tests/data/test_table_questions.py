"""Table questions (wide tasks) in question files: unique_columns is read and checked against the gold table."""

import json

import pytest

from executor_sft.data import QuestionFormatError, load_questions

TABLE = "| City | Population |\n|---|---|\n| Orla | 1,200 |\n| Vemm | 300 |"


def _write(tmp_path, **row):
    path = tmp_path / "q.jsonl"
    path.write_text(
        json.dumps({"id": "w1", "question": "For each city ...", "golden_answers": [TABLE], **row}) + "\n"
    )
    return path


def test_unique_columns_make_a_table_question(tmp_path):
    (q,) = load_questions(_write(tmp_path, unique_columns=["City"]))
    assert q.unique_columns == ["City"] and q.answer_format == "table"
    (plain,) = load_questions(_write(tmp_path))
    assert plain.unique_columns is None and plain.answer_format == "text"
    assert "unique_columns" not in json.loads(plain.to_json())


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"unique_columns": "City"}, "field 'unique_columns': must be a non-empty list"),
        (
            {"unique_columns": ["Town"]},
            "field 'golden_answers': unique_columns ['Town'] must name gold columns",
        ),
        ({"unique_columns": ["City"], "golden_answers": ["Orla"]}, "not a Markdown table"),
        ({"unique_columns": ["City"], "golden_answers": [TABLE, TABLE]}, "one gold Markdown table"),
        (
            {"unique_columns": ["City"], "column_rules": {"Population": {"metric": "fuzzy"}}},
            "field 'column_rules': column metric 'fuzzy' is not one of",
        ),
        (
            {"unique_columns": ["City"], "column_rules": {"Area": {"metric": "exact_match"}}},
            "field 'column_rules': column rules name ['area'], which are not gold columns",
        ),
        ({"column_rules": {"City": {}}}, "field 'column_rules': only a table question"),
    ],
)
def test_a_bad_table_question_names_its_line_and_field(tmp_path, row, problem):
    with pytest.raises(QuestionFormatError, match="q.jsonl:1: ") as err:
        load_questions(_write(tmp_path, **row))
    assert problem in str(err.value)


def test_column_rules_are_kept_and_used(tmp_path):
    rules = {"Population": {"metric": "number_near", "criterion": 0.1}}
    (q,) = load_questions(_write(tmp_path, unique_columns=["City"], column_rules=rules))
    assert q.column_rules == rules
    from executor_sft.metrics import table_scores

    pred = TABLE.replace("1,200", "1,150")  # within 10%
    assert table_scores(pred, TABLE, q.unique_columns, rules=q.column_rules).success == 1.0

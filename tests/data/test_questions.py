import json
import logging
from collections import Counter

import pytest

from executor_sft.data import QuestionFormatError, load_questions
from tests.support import minibench_questions, seed_splits_dir


@pytest.mark.shared_data
def test_minibench_questions_load_with_gold_passages():
    questions = load_questions(minibench_questions())
    assert len(questions) == 1356
    assert all(q.positive_doc_ids for q in questions)
    datasets = {q.dataset for q in questions}
    assert datasets == {"hotpotqa", "musique", "2wikimultihopqa"}
    musique = next(q for q in questions if q.dataset == "musique")
    assert musique.decomposition and "question" in musique.decomposition[0]


@pytest.mark.shared_data
def test_paper_train_split_answer_string():
    questions = load_questions(seed_splits_dir() / "train_mixed3000.jsonl")
    assert len(questions) == 3000
    assert all(isinstance(q.golden_answers, list) and q.golden_answers for q in questions)
    # empty positive_doc_ids lists mean "unknown", not "no gold passages"
    assert all(q.positive_doc_ids is None for q in questions)


@pytest.mark.shared_data
def test_paper_test_split_drops_repeated_musique_rows(caplog):
    with caplog.at_level(logging.WARNING):
        questions = load_questions(seed_splits_dir() / "test_all_clean_3869.jsonl")
    assert len(questions) == 3762
    assert len({q.id for q in questions}) == 3762
    assert "dropped 107 rows with duplicate ids" in caplog.text


@pytest.mark.shared_data
def test_paper_test_split_keeps_repeats_for_evaluation():
    questions = load_questions(seed_splits_dir() / "test_all_clean_3869.jsonl", duplicates="keep")
    assert len(questions) == 3869 and len({q.id for q in questions}) == 3869
    counts = Counter(q.dataset for q in questions)
    assert counts == {"2wikimultihopqa": 991, "hotpotqa": 963, "musique": 988, "popqa": 818, "bamboogle": 109}
    repeats = [q for q in questions if q.model_extra.get("duplicate_of")]
    assert len(repeats) == 107 and {q.dataset for q in repeats} == {"musique"}
    again = load_questions(seed_splits_dir() / "test_all_clean_3869.jsonl", duplicates="keep")
    assert [q.id for q in again] == [q.id for q in questions]


def test_repeated_ids_get_distinct_stable_ids(tmp_path, caplog):
    path = tmp_path / "rep.jsonl"
    rows = [{"id": i, "question": f"{i}?", "answer": "a"} for i in ("x", "y", "x", "x~2", "x")]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    kept = load_questions(path, duplicates="keep")
    assert [q.id for q in kept] == ["x", "y", "x~2~", "x~2", "x~3"]
    assert [q.model_extra.get("duplicate_of") for q in kept] == [None, None, "x", None, "x"]
    with caplog.at_level(logging.WARNING):
        dropped = load_questions(path)
    assert [q.id for q in dropped] == ["x", "y", "x~2"]
    assert "dropped 2 rows with duplicate ids" in caplog.text
    with pytest.raises(ValueError, match="duplicates must be"):
        load_questions(path, duplicates="first")


@pytest.mark.shared_data
def test_parquet_without_id_uses_the_sets_index():
    questions = load_questions(seed_splits_dir() / "val_mixed_900.parquet")
    assert len(questions) == 900
    assert questions[0].id == "val_mixed_900-hotpotqa-0"
    assert questions[0].golden_answers == ["Prussian"]
    assert len({q.id for q in questions}) == 900


def test_ids_are_stable_across_loads(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"q{i}?", "answer": "a"}) for i in range(3)) + "\n")
    first, second = load_questions(path), load_questions(path)
    assert [q.id for q in first] == [q.id for q in second] == ["set-1", "set-2", "set-3"]


def test_search_r1_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": "nq",
            "prompt": [{"role": "user", "content": "who wrote x?"}],
            "reward_model": {"ground_truth": {"target": ["A", "B"]}},
            "extra_info": {"index": 7},
        }
    ]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    (q,) = load_questions(path)
    assert (q.id, q.question, q.golden_answers, q.dataset) == ("train-nq-7", "who wrote x?", ["A", "B"], "nq")


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"id": "x", "question": "q?"}', "golden_answers"),
        ('{"id": "x", "question": "", "answer": "a"}', "question"),
        ('{"id": "x", "question": "q?", "golden_answers": []}', "golden_answers"),
        ('{"id": "x", "question": "q?", "answer": {"a": 1}}', "answer"),
        ('{"id": "x", "question": "q?", "answer": "a"', "<json>"),
        ("[1, 2]", "<row>"),
    ],
)
def test_malformed_row_names_file_line_and_field(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "ok", "question": "fine?", "answer": "yes"})
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(QuestionFormatError) as info:
        load_questions(path)
    message = str(info.value)
    assert f"{path}:3:" in message
    assert f"'{field}'" in message

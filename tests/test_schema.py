import pytest

from executor_sft.schema import (
    Episode,
    ExecutorRun,
    Outcome,
    Question,
    Report,
    Round,
    SearchRecord,
    content_text,
)


def test_episode_round_trip_keeps_contract_names_and_extra_fields():
    run = ExecutorRun(
        run_id="q#0/r0/q0/teacher",
        round=0,
        sub_query_index=0,
        sub_query="who?",
        role="teacher",
        model="m",
        max_turns=3,
        max_searches=2,
        searches=[SearchRecord(query="who", doc_ids=["d1"])],
        n_searches=1,
        finish="report",
        report=Report(answer="x", evidence="e"),
        outcome=Outcome(answer="x", em=1.0, f1=1.0, judge=True),
        custom_field={"kept": True},
    )
    episode = Episode(
        episode_id="q#0",
        question=Question(id="q", question="who?", golden_answers=["x"]),
        rounds=[Round(index=0, sub_queries=["who?"])],
        runs=[run],
    )
    data = episode.to_dict()
    assert data["schema"] == "executor_sft.episode/v1"
    assert data["runs"][0]["custom_field"] == {"kept": True}
    assert set(data) >= {
        "episode_id",
        "sample_index",
        "question",
        "config",
        "rounds",
        "runs",
        "answer",
        "metrics",
        "usage",
        "stop_reason",
        "error",
    }
    again = Episode.from_json(episode.to_json())
    assert again == episode
    assert again.runs_for("teacher")[0].outcome.judge is True


def test_older_episodes_without_the_declared_fields_load_and_keep_their_shape():
    """Fields declared later (run extras, outcome substitution, round drops) load from records
    that lack them and are not invented when such a record is written again."""
    from executor_sft.schema import Episode

    old = {
        "schema": "executor_sft.episode/v1",
        "episode_id": "q1#0",
        "question": {"id": "q1", "question": "Q?", "golden_answers": ["a"], "dataset": "d"},
        "rounds": [{"index": 0, "sub_queries": ["s?"], "backbone": None}],
        "runs": [
            {
                "run_id": "r",
                "round": 0,
                "sub_query_index": 0,
                "sub_query": "s?",
                "role": "teacher",
                "model": "m",
                "max_turns": 3,
                "max_searches": 2,
                "outcome": {"answer": "a", "em": 1.0, "f1": 1.0, "judge": True},
            }
        ],
    }
    episode = Episode.model_validate(old)
    run = episode.runs[0]
    assert (run.calls, run.n_corrections, run.error, run.protocol) == ([], 0, None, "native")
    assert run.outcome.substituted is None and run.outcome.answerer_call is None
    again = episode.to_dict()
    assert "substituted" not in again["runs"][0]["outcome"] and "answerer" not in again
    assert "dropped_sub_queries" not in again["rounds"][0] and "split" not in again["question"]


def test_episode_ids_have_one_format():
    from executor_sft.schema import episode_id

    assert episode_id("hotpotqa-7", 3) == "hotpotqa-7#3"


@pytest.mark.parametrize(
    ("content", "text"),
    [
        (None, ""),
        ("", ""),
        ("a report", "a report"),
        ([{"type": "text", "text": "a "}, {"type": "text", "text": "report"}], "a report"),
        ([{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "seen"}], "seen"),
        ([{"type": "text", "text": None}, "stray", {"type": "text"}], ""),
        ([], ""),
    ],
)
def test_content_text(content, text) -> None:
    assert content_text(content) == text

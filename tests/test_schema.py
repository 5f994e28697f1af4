from executor_sft.schema import Episode, ExecutorRun, Outcome, Question, Report, Round, SearchRecord


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
    assert set(data) >= {"episode_id", "sample_index", "question", "config", "rounds", "runs", "answer",
                         "metrics", "usage", "stop_reason", "error"}
    again = Episode.from_json(episode.to_json())
    assert again == episode
    assert again.runs_for("teacher")[0].outcome.judge is True

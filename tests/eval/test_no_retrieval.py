"""Mode `no_retrieval` (Tab. 6's control) and prompt files swapped in by `pipeline.prompts.directory`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor_sft.eval import load_eval_config, run_eval
from tests.support.doubles import ScriptedChatModel

QUESTIONS = [
    {"id": "q1", "question": "Who wrote Dune?", "answer": "Frank Herbert", "dataset": "popqa"},
    {"id": "q2", "question": "Capital of Peru?", "answer": "Lima", "dataset": "popqa"},
]


def _config(tmp_path, prompts: dict | None = None) -> str:
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    config = {
        "output_dir": str(tmp_path / "out"),
        "mode": "no_retrieval",
        "questions": [{"path": str(qfile)}],
        "samples": 2,
        "models": {"answerer": {"model": "memory"}, "judge": {"model": "judge"}},
        "pipeline": {"roles": {"answerer": {"sampling": {"temperature": 0.7, "max_tokens": 32}}}},
    }
    if prompts is not None:
        config["pipeline"]["prompts"] = prompts
    path = tmp_path / "eval.yaml"
    path.write_text(json.dumps(config))
    return str(path)


def test_the_answerer_alone_with_your_own_prompt_files(tmp_path):
    own = tmp_path / "prompts"
    own.mkdir()
    (own / "answerer.md").write_text("MY ANSWERER: answer from memory in <answer></answer>.\n")
    (own / "judge.md").write_text("MY JUDGE. Q: {question} GOLD: {golden_answers} PRED: {prediction}\n")
    config = load_eval_config(_config(tmp_path, {"directory": str(own)}))
    assert config.retriever is None and not config.needs_retriever
    answerer = ScriptedChatModel(name="memory", default="<answer>Frank Herbert</answer>")
    judge = ScriptedChatModel(name="judge", default="True")
    run = run_eval(config, models={"answerer": answerer, "judge": judge}, progress=False)

    assert run.ran == 4 and not run.failed
    first = answerer.requests[0]["messages"]
    assert first[0]["content"] == "MY ANSWERER: answer from memory in <answer></answer>."
    assert "Findings: none" in first[1]["content"] and answerer.requests[0]["tools"] is None
    assert answerer.requests[0]["sampling"].temperature == 0.7  # the answerer role's sampling
    judged = [r["messages"][0]["content"] for r in judge.requests]
    assert judged and all(m.startswith("MY JUDGE. Q: ") for m in judged)  # the judge prompt from the folder
    a = run.results.average
    assert a["em"] == 0.5 and a["no_subquery_share"] == 1.0  # right on Dune, wrong on Peru
    episodes = [json.loads(line) for line in (tmp_path / "out" / "episodes.jsonl").open()]
    assert {e["config"]["mode"] for e in episodes} == {"no_retrieval"}
    assert all(e["runs"] == [] and e["usage"]["answerer"]["calls"] == 1 for e in episodes)


def test_other_modes_still_need_a_retriever(tmp_path):
    path = Path(_config(tmp_path))
    data = json.loads(path.read_text())
    data.update(mode="single_agent", models={"single_agent": {"model": "agent"}})
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="retriever: required for mode=single_agent"):
        load_eval_config(path)

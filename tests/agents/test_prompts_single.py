"""Prompt overrides (text or file) and the single-agent baseline."""

from __future__ import annotations

import pytest
from agent_helpers import QUESTION, ToyRetriever, report, search_call

from executor_sft.agents import PipelineConfig, Prompts, run_executor, run_single_agent
from executor_sft.agents.prompting import PROMPT_NAMES, packaged_prompt
from executor_sft.schema import Episode
from tests.support.doubles import ScriptedChatModel


def test_every_packaged_prompt_exists_and_uses_its_placeholders():
    for name in PROMPT_NAMES:
        assert len(packaged_prompt(name)) > 100, name
    assert "{max_searches}" in packaged_prompt("executor_native")
    assert "{max_parallel}" in packaged_prompt("backbone")
    assert "{prediction}" in packaged_prompt("judge")
    assert "<search>" in packaged_prompt("executor_tag")


async def test_override_from_text_and_file(tmp_path):
    path = tmp_path / "exec.md"
    path.write_text("FILE PROMPT: at most {max_searches} searches, top {top_k}. JSON {braces} stay.\n")
    config = PipelineConfig.model_validate(
        {"prompts": {"executor_native": f"file:{path}", "answerer": "TEXT PROMPT"}}
    )
    assert config.prompts.get("answerer") == "TEXT PROMPT"
    model = ScriptedChatModel([report("x")])
    await run_executor(model, ToyRetriever(), "q", prompts=config.prompts, max_turns=3, top_k=5)
    assert (
        model.requests[0]["messages"][0]["content"]
        == "FILE PROMPT: at most 2 searches, top 5. JSON {braces} stay."
    )


def test_a_directory_of_prompt_files_replaces_those_present(tmp_path):
    (tmp_path / "backbone.md").write_text("MY BACKBONE: {max_parallel} at a time\n")
    (tmp_path / "judge.md").write_text("MY JUDGE {question} {golden_answers} {prediction}\n")
    prompts = Prompts(directory=str(tmp_path), judge="EXPLICIT JUDGE")
    assert prompts.render("backbone", max_parallel=3) == "MY BACKBONE: 3 at a time"
    assert prompts.get("judge") == "EXPLICIT JUDGE"  # a field set explicitly wins over the directory
    assert prompts.get("answerer") == packaged_prompt("answerer")  # no answerer.md: packaged
    with pytest.raises(ValueError, match="prompts directory not found"):
        Prompts(directory=str(tmp_path / "nope"))


def test_missing_prompt_file_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="backbone.*not found"):
        Prompts(backbone=f"file:{tmp_path}/nope.md")
    with pytest.raises(ValueError):
        Prompts(unknown="x")


async def test_single_agent_episode():
    model = ScriptedChatModel(
        [
            search_call("Velmora founder"),
            search_call("Ada Krell born"),
            search_call("Tarsin province"),
            report("Eldmark"),
        ],
        name="solo",
    )
    ep = await run_single_agent(model, ToyRetriever(), QUESTION, sample_index=1, max_turns=5)
    assert ep.episode_id == "q-velmora#1"
    (run,) = ep.runs
    assert run.role == "single_agent" and run.finish == "report" and run.n_searches == 3
    assert run.run_id == "q-velmora#1/r0/q0/single_agent"
    assert run.messages[1]["content"] == QUESTION.question
    assert "several facts" in run.messages[0]["content"]  # its own prompt, not the executor's
    assert ep.answer == "Eldmark" and ep.metrics.em == 1.0 and run.outcome.em == 1.0
    assert ep.usage["single_agent"].calls == 4
    assert ep.rounds[0].sub_queries == [QUESTION.question] and ep.rounds[0].backbone is None
    assert Episode.model_validate_json(ep.to_json()).to_dict() == ep.to_dict()


async def test_single_agent_without_report():
    ep = await run_single_agent(ScriptedChatModel(default="hmm"), ToyRetriever(), QUESTION)
    assert ep.answer is None and ep.metrics.em == 0.0 and ep.runs[0].finish == "invalid"
    assert ep.stop_reason == "stopped"

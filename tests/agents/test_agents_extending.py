"""docs/architecture.md, "An executor tool": the example saved as a user's own file, configured by
its import path, called by the model in a real executor run, and rendered by a real chat template."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
import yaml
from agent_helpers import ToyRetriever, report, search_call

from executor_sft.agents import SEARCH_TOOL, PipelineConfig, run_executor
from executor_sft.llm.transformers_backend import render_prompt
from tests.support.docs import doc_block, write_doc_module
from tests.support.doubles import ScriptedChatModel, assistant, tool_call

HEADING = "An executor tool"
MODULE = "my_executor_tools"


@pytest.fixture()
def user_tools(tmp_path, monkeypatch):
    """The docs' tool file saved in a user's project and put on the import path."""
    write_doc_module("architecture.md", HEADING, tmp_path, MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = yaml.safe_load(doc_block("architecture.md", HEADING, lang="yaml"))["pipeline"]
    config["tools"] = [name.replace("my_tools:", f"{MODULE}:") for name in config["tools"]]
    yield PipelineConfig.model_validate(config)
    sys.modules.pop(MODULE, None)


def lookup(title: str, call_id: str = "c_lookup") -> dict:
    return assistant(tool_calls=[tool_call("lookup_title", {"title": title}, call_id)])


async def test_configured_tool_is_offered_every_turn_and_its_output_is_the_tool_message(user_tools):
    settings = user_tools.executor_settings("teacher")
    model = ScriptedChatModel([lookup("Tarsin"), search_call("Ada Krell"), report("Eldmark")])
    run = await run_executor(model, ToyRetriever(), "Which province is Tarsin in?", settings, max_turns=3)

    assert run.finish == "report" and run.report.answer == "Eldmark"
    tool_message = run.messages[3]
    assert tool_message == {
        "role": "tool",
        "tool_call_id": "c_lookup",
        "content": "Doc 1 (Title: Tarsin) Tarsin is the capital of the province of Eldmark.",
    }
    # The lookup is no search: only the search call counts against the budget and in n_searches.
    assert run.n_searches == 1 and [s.query for s in run.searches] == ["Ada Krell"]
    names = [[t["function"]["name"] for t in r["tools"]] for r in model.requests]
    assert names == [["search", "lookup_title"]] * 3
    assert model.requests[0]["tools"][0] == SEARCH_TOOL


async def test_tool_argument_error_is_a_correction(user_tools):
    settings = user_tools.executor_settings("teacher")
    model = ScriptedChatModel([lookup("  "), report("Eldmark")])
    run = await run_executor(model, ToyRetriever(), "Which province is Tarsin in?", settings)
    assert run.finish == "report" and run.n_corrections == 1
    correction = run.messages[3]
    assert (
        correction["role"] == "tool"
        and 'the lookup_title call has no "title" string' in correction["content"]
    )
    assert "Either call one of the tools 'search', 'lookup_title' once" in correction["content"]


def test_the_tool_schema_reaches_a_real_chat_template(user_tools, qwen3_tokenizer):
    settings = user_tools.executor_settings("teacher")
    model = ScriptedChatModel([lookup("Tarsin"), report("Eldmark")])
    asyncio.run(run_executor(model, ToyRetriever(), "Which province is Tarsin in?", settings))
    second = model.requests[1]
    prompt = render_prompt(qwen3_tokenizer, second["messages"], second["tools"], enable_thinking=False)
    tools_block = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    offered = [json.loads(line) for line in tools_block.splitlines()]
    assert [t["function"]["name"] for t in offered] == ["search", "lookup_title"]
    assert offered[1]["function"]["parameters"]["required"] == ["title"]
    assert "<tool_response>\nDoc 1 (Title: Tarsin) Tarsin is the capital" in prompt


def test_unknown_or_wrong_tool_names_are_config_errors(user_tools):
    with pytest.raises(ValueError, match="did you mean 'search'"):
        PipelineConfig(tools=["serch"])
    with pytest.raises(ValueError, match="not an agents.tools.Tool"):
        PipelineConfig(tools=[f"{MODULE}:lookup_title"])  # the coroutine function, not the Tool
    with pytest.raises(ValueError, match="tag protocol has only <search>"):
        PipelineConfig(tools=user_tools.tools, roles={"student": {"protocol": "tag"}})


def test_default_tools_stay_out_of_the_episode_config_record(user_tools):
    assert "tools" not in PipelineConfig().model_dump(mode="json")
    assert user_tools.model_dump(mode="json")["tools"] == ["search", f"{MODULE}:LOOKUP_TITLE"]


async def test_the_sft_row_of_a_run_lists_every_tool_it_was_offered(user_tools, qwen3_tokenizer):
    from executor_sft.filters.pipeline import offered_tools
    from executor_sft.filters.rows import to_sft_row

    settings = user_tools.executor_settings("teacher")
    model = ScriptedChatModel([lookup("Tarsin"), search_call("Ada Krell"), report("Eldmark")])
    run = await run_executor(model, ToyRetriever(), "Which province is Tarsin in?", settings, max_turns=3)
    row = to_sft_row(
        run.messages,
        stratum="s",
        source_run_id=run.run_id,
        question_id="q",
        dataset="d",
        tools=offered_tools(run.calls),
    )
    assert [t["function"]["name"] for t in row["tools"]] == ["search", "lookup_title"]
    # Trained under the prompt the model saw: the last request rendered with the row's tools.
    last = model.requests[-1]
    seen = render_prompt(qwen3_tokenizer, last["messages"], last["tools"], enable_thinking=False)
    trained = render_prompt(
        qwen3_tokenizer, row["messages"][: len(last["messages"])], row["tools"], enable_thinking=False
    )
    assert trained == seen

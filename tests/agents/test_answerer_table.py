"""The answerer asked for a table: its prompt, a prompts directory override, and a reply that keeps its lines."""

import asyncio

from executor_sft.agents.answerer import answerer_messages, parse_table_answer, run_answerer
from executor_sft.agents.prompting import Prompts, packaged_prompt
from executor_sft.llm.base import ChatResult
from executor_sft.schema import Report, TokenUsage

TABLE = "| City | Population |\n|---|---|\n| Orla | 1,200 |"


class _Reply:
    name = "reply"

    def __init__(self, content):
        self.content = content

    async def chat(self, messages, tools=None, sampling=None):
        return ChatResult(
            message={"role": "assistant", "content": self.content},
            usage=TokenUsage(),
            latency_s=0.0,
            model="x",
        )


def test_a_table_question_gets_the_table_prompt_and_a_directory_can_replace_it(tmp_path):
    findings = [("Which cities are in Dresk?", Report(answer="Orla", evidence=""))]
    text = answerer_messages("For each city ...", findings)[0]["content"]
    table = answerer_messages("For each city ...", findings, answer_format="table")[0]["content"]
    assert text == packaged_prompt("answerer") and table == packaged_prompt("answerer_table")
    assert "Markdown table" in table and "Markdown table" not in text
    (tmp_path / "answerer_table.md").write_text("Tables, please.")
    own = answerer_messages("q", findings, Prompts(directory=str(tmp_path)), answer_format="table")
    assert own[0]["content"] == "Tables, please."
    assert "answerer_table" not in Prompts().model_dump()  # unset: episode records unchanged


def test_a_table_reply_keeps_its_lines_and_a_text_reply_is_squashed():
    reply = (
        f"<think>draft | a |</think>Here:\n<answer>\n  {TABLE.replace(chr(10), chr(10) + '  ')}\n</answer>"
    )
    assert parse_table_answer(reply) == TABLE
    assert parse_table_answer(TABLE) == TABLE  # no tags: the visible reply
    table = asyncio.run(run_answerer(_Reply(reply), "q", [], answer_format="table"))
    text = asyncio.run(run_answerer(_Reply(reply), "q", []))
    assert table.answer == TABLE and text.answer == " ".join(TABLE.split())

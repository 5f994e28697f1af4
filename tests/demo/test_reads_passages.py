"""bench/demo_reads_passages.py's edits: the named namesake's passage first, or no descriptor."""

from __future__ import annotations

from pathlib import Path

from script_modules import load_script

from bench.probing.probe import AMBIGUOUS, Turn2Prompt

REPO = Path(__file__).resolve().parents[2]


def _bench():
    return load_script("bench/demo_reads_passages.py")


NAMESAKES = "\n".join(
    [
        "Doc 1 (Title: Ada Vel) Ada Vel is a cartographer born in Baek in 1978.",
        "Doc 2 (Title: Ada Vel) Ada Vel is a politician born in Skin in 1970.",
        "Doc 3 (Title: Orin) Orin is a river.",
    ]
)
CORPUS = {
    "Ada Vel": [
        "Ada Vel is a cartographer born in Baek in 1978.",
        "Ada Vel is a film director born in Skuv in 1971.",
        "Ada Vel is a politician born in Skin in 1970.",
    ]
}


def _prompt(question: str) -> Turn2Prompt:
    call = {
        "id": "c0",
        "type": "function",
        "function": {"name": "search", "arguments": '{"query": "Ada Vel"}'},
    }
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": NAMESAKES},
    ]
    return Turn2Prompt(AMBIGUOUS, messages)


def test_gold_first_puts_the_named_namesake_on_the_page_and_keeps_the_rest():
    bench = _bench()
    original = _prompt("In which city was Ada Vel (film director) born?")
    edited = bench._edit(original, CORPUS, "gold first")
    lines = edited.messages[3]["content"].split("\n")
    assert lines[0] == "Doc 1 (Title: Ada Vel) Ada Vel is a film director born in Skuv in 1971."
    assert lines[1:] == NAMESAKES.split("\n")[1:]
    assert edited.messages[1] == original.messages[1]
    assert original.messages[3]["content"] == NAMESAKES  # the collected prompt is left as it was


def test_no_descriptor_edits_only_the_sub_query():
    bench = _bench()
    edited = bench._edit(_prompt("In which city was Ada Vel (film director) born?"), CORPUS, "no descriptor")
    assert edited.messages[1]["content"] == "In which city was Ada Vel born?"
    assert edited.messages[3]["content"] == NAMESAKES


def test_a_sub_query_without_a_descriptor_or_a_named_passage_is_left_out():
    bench = _bench()
    assert bench._edit(_prompt("In which city was Ada Vel born?"), CORPUS, "gold first") is None
    assert bench._edit(_prompt("In which city was Ada Vel (astronomer) born?"), CORPUS, "gold first") is None

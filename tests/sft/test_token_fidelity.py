"""Token fidelity: a row's re-rendered assistant turns against the ids its model sampled (real tokenizers)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from forkserver import run_script
from trl import ModelConfig, SFTConfig

from executor_sft.filters import EpisodeFilter
from executor_sft.filters.rows import to_sft_row
from executor_sft.llm.offline import chatml_tools_template
from executor_sft.llm.vocabulary import vocabulary_id
from executor_sft.schema import Episode, ExecutorRun, Outcome, Question, Report, SearchRecord
from executor_sft.sft.fidelity import FidelityReport, check_row
from executor_sft.sft.render import IGNORE_INDEX
from executor_sft.sft.tokenize import tokenize_example
from executor_sft.sft.train import SFTScriptArguments, prepare_dataset, train_executor

REPO = Path(__file__).resolve().parents[2]
# What the model wrote (compact JSON) and what the training template renders from the parsed call.
SAMPLED_CALL = '<tool_call>\n{"name":"search","arguments":{"query":"x"}}\n</tool_call><|im_end|>'
RENDERED_CALL = '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call><|im_end|>'
REPORT = "<answer>X</answer><evidence>Doc 1 says X.</evidence>"


def _messages(call_id: str = "c0") -> list[dict]:
    return [
        {"role": "system", "content": "You are a search sub-agent."},
        {"role": "user", "content": "What is x?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "search", "arguments": '{"query":"x"}'}}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "Doc 1 (Title: X) X is x."},
        {"role": "assistant", "content": REPORT},
    ]  # fmt: skip


def _sampled(tok, call_text: str, vocabulary: str | None = None) -> list[dict]:
    vocabulary = vocabulary or vocabulary_id(tok)
    return [
        {"ids": tok(text, add_special_tokens=False)["input_ids"], "vocabulary": vocabulary}
        for text in (call_text, REPORT + "<|im_end|>")
    ]


def _row(
    tok, call_text: str | None, run_id: str, stratum: str = "single_search", vocabulary: str | None = None
):
    sampled = _sampled(tok, call_text, vocabulary) if call_text is not None else None
    return to_sft_row(
        _messages(),
        stratum=stratum,
        source_run_id=run_id,
        question_id=run_id,
        dataset="d",
        sampled_tokens=sampled,
    )


def _rows(tok) -> list[dict]:
    return [
        _row(tok, SAMPLED_CALL, "drifted"),
        _row(tok, RENDERED_CALL, "faithful"),
        _row(tok, None, "no-ids", stratum="info_gain_multi_search"),
        _row(tok, SAMPLED_CALL, "other-vocab", vocabulary="999-0000000000000000"),
    ]


def test_reserialised_tool_call_json_is_drift_and_counted_per_stratum(qwen3_tokenizer):
    tok = qwen3_tokenizer
    drifted, faithful = _rows(tok)[:2]
    check = check_row(drifted, tokenize_example(drifted, tok), tok)
    assert check.status == "drift" and check.detail.startswith("assistant turn 0")
    assert check_row(faithful, tokenize_example(faithful, tok), tok).status == "match"

    fidelity = FidelityReport("warn")
    dataset, _ = prepare_dataset(_rows(tok), tok, 4096, disable_progress=True, fidelity=fidelity)
    assert len(dataset) == 4  # warn trains every row as rendered
    report = fidelity.to_dict()
    assert report["totals"] == {
        "rows": 4,
        "checked": 2,
        "drifted": 1,
        "without_ids": 1,
        "other_vocabulary": 1,
    }
    assert report["strata"]["single_search"]["drifted"] == 1
    assert report["strata"]["info_gain_multi_search"] == {
        "rows": 1, "checked": 0, "drifted": 0, "without_ids": 1, "other_vocabulary": 0,
    }  # fmt: skip
    assert report["first_drifts"][0].startswith("drifted: assistant turn 0")
    assert fidelity.summary() == (
        "token fidelity (warn): 2 rows checked, 1 drifted, 1 without ids, 1 of another vocabulary "
        "(drifted/checked: single_search 1/2)"
    )


def test_refuse_drops_drifted_rows_and_recorded_trains_the_sampled_ids(qwen3_tokenizer):
    tok = qwen3_tokenizer
    refused = FidelityReport("refuse")
    dataset, _ = prepare_dataset(_rows(tok), tok, 4096, disable_progress=True, fidelity=refused)
    assert len(dataset) == 3 and refused.refused == 1

    recorded = FidelityReport("recorded")
    dataset, _ = prepare_dataset(_rows(tok)[:1], tok, 4096, disable_progress=True, fidelity=recorded)
    assert recorded.trained_on_recorded == 1
    ids, labels = dataset[0]["input_ids"], dataset[0]["labels"]
    trained = [i for i, label in zip(ids, labels, strict=True) if label != IGNORE_INDEX]
    sampled = _sampled(tok, SAMPLED_CALL)
    assert trained == sampled[0]["ids"] + sampled[1]["ids"]  # exactly the sampled ids carry loss
    assert all(label in (IGNORE_INDEX, i) for i, label in zip(ids, labels, strict=True))
    assert "Doc 1 (Title: X) X is x." in tok.decode(ids)  # the passage is there, and carries no loss


def _episode(tok, call_text: str, n: int) -> dict:
    messages = _messages(f"c{n}")
    messages[1]["content"] = f"What is x{n}?"  # distinct rows: the filter keeps identical ones once
    calls = [
        {"model": "m", "messages": [], "response": {}, "error": None, "sampled_tokens": s}
        for s in _sampled(tok, call_text)
    ]
    run = ExecutorRun(
        run_id=f"student/{n}", round=0, sub_query_index=0, sub_query=messages[1]["content"], role="student",
        model="m", max_turns=3, max_searches=2, messages=messages, searches=[SearchRecord(query="x")],
        n_searches=1, finish="report", report=Report(answer="X"), calls=calls,
        outcome=Outcome(answer="X", em=1.0, f1=1.0, judge=True),
    )  # fmt: skip
    question = Question(id=f"q{n}", question="What is x?", golden_answers=["X"], dataset="d")
    return Episode(episode_id=f"q{n}#0", question=question, runs=[run]).to_dict()


def test_filter_counts_drift_per_stratum(qwen3_tokenizer):
    tok = qwen3_tokenizer
    episodes = [_episode(tok, SAMPLED_CALL, 0), _episode(tok, RENDERED_CALL, 1)]
    filt = EpisodeFilter(fidelity_tokenizer=tok)
    rows = list(filt.stream(episodes))
    assert [len(r["sampled_tokens"]) for r in rows] == [2, 2]
    section = filt.report.to_dict()["token_fidelity"]
    assert section["strata"]["single_search"] == {
        "rows": 2, "checked": 2, "drifted": 1, "without_ids": 0, "other_vocabulary": 0,
    }  # fmt: skip


@pytest.mark.slow
def test_filter_recipe_reports_drift_with_the_tokenizer_and_counts_without(qwen3_tokenizer, tmp_path):
    """The recipe, as a user runs it: with --fidelity_tokenizer it compares, without it only counts."""
    episodes = [_episode(qwen3_tokenizer, SAMPLED_CALL, 0), _episode(qwen3_tokenizer, RENDERED_CALL, 1)]
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    for flag, expected in (
        (["--fidelity_tokenizer", "offline:qwen3"], {"checked": 2, "drifted": 1}),
        ([], {"checked": 0, "drifted": 0, "unchecked": 2}),
    ):
        out = run_script(
            [sys.executable, str(REPO / "recipes" / "filter_trajectories.py"), "--rollouts", str(rollouts),
             "--output", str(tmp_path / "sft.jsonl"), "--report", str(tmp_path / "report.json"), *flag],
            capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        totals = json.loads((tmp_path / "report.json").read_text())["token_fidelity"]["totals"]
        assert {k: totals.get(k) for k in expected} == expected
        assert (
            f"token fidelity: {expected['checked']} rows checked, {expected['drifted']} drifted" in out.stderr
        )


def test_rows_without_ids_leave_the_filter_report_as_it_was():
    from executor_sft.filters import filter_episodes, iter_jsonl

    report = filter_episodes(iter_jsonl(REPO / "data" / "rollouts.jsonl")).report
    assert "token_fidelity" not in report


@pytest.mark.slow
def test_sft_run_reports_drift_and_refuses_it(tmp_path):
    from tests.support import tiny_qwen3_tokenizer

    tok = tiny_qwen3_tokenizer()
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows(tok)))
    args = SFTConfig(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, max_length=1024,
        save_strategy="no", report_to="none", bf16=False, use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    result = train_executor(
        SFTScriptArguments(dataset_name=str(data), token_drift="refuse"),
        args,
        ModelConfig("offline:tiny-qwen3"),
    )
    assert result.metrics["train_rows"] == 3 and result.fidelity.refused == 1
    assert result.fidelity.totals()["drifted"] == 1
    card = (tmp_path / "out" / "README.md").read_text()
    assert "### Token fidelity" in card and '"drifted": 1' in card


@pytest.mark.slow
def test_real_smollm2_generation_is_stored_and_trains_as_sampled(smollm2):
    """A real greedy generation: its ids go into the row, and the rendering of the parsed reply matches them."""
    from executor_sft.llm import SamplingParams, TransformersChatModel

    model, tok = smollm2
    chat = TransformersChatModel(model, tok, chat_template=chatml_tools_template(), max_batch_size=1)
    prompt = [
        {"role": "system", "content": "Answer in one short sentence."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    result = chat.generate_sync(prompt, None, SamplingParams(max_tokens=40))
    assert result.finish_reason == "stop" and result.sampled_tokens.ids[-1] == tok.convert_tokens_to_ids(
        "<|im_end|>"
    )
    row = to_sft_row(
        [*prompt, result.message], stratum="s", source_run_id="r", question_id="q", dataset="d",
        sampled_tokens=[result.sampled_tokens.model_dump(mode="json")],
    )  # fmt: skip
    example = tokenize_example(row, tok, chat_template=chatml_tools_template())
    check = check_row(row, example, tok)
    assert check.status == "match", check.detail
    assert check.recorded[0] == result.sampled_tokens.ids


def test_malformed_sampled_tokens_is_a_row_error(qwen3_tokenizer, tmp_path):
    from executor_sft.errors import RowError
    from executor_sft.sft.data import read_sft_jsonl

    row = _row(qwen3_tokenizer, SAMPLED_CALL, "r")
    for bad, says in (
        (row["sampled_tokens"][:1], "one entry per assistant message (2)"),
        ([{"ids": ["x"]}, None], "sampled_tokens[0].ids must be a list of token ids"),
    ):
        path = tmp_path / "sft.jsonl"
        path.write_text(json.dumps({**row, "sampled_tokens": bad}) + "\n")
        with pytest.raises(RowError, match=rf"sft.jsonl:1: field .*{re.escape(says)}"):
            read_sft_jsonl(path)


def test_a_turn_cut_at_a_stop_string_is_compared_with_its_end_of_turn_added(qwen3_tokenizer):
    tok = qwen3_tokenizer
    row = _row(tok, RENDERED_CALL, "stopped")
    row["sampled_tokens"][1]["ids"] = tok(REPORT, add_special_tokens=False)["input_ids"]  # no <|im_end|>
    check = check_row(row, tokenize_example(row, tok), tok)
    assert check.status == "match", check.detail
    assert check.recorded[1][-1] == tok.convert_tokens_to_ids("<|im_end|>")

"""Helpers of the post-training tests (distillation and GRPO): recipes as commands, the saved
outputs those tests start from, and scripted generation.

The session fixtures over the saved outputs (`world_index`, `sft_output`, `tiny_checkpoint`,
`tiny_teacher`) are in tests/conftest.py, so every directory shares one build of each.

Scripted generation, for real GRPO and distillation runs on CPU with a tiny random Qwen3: the random model almost never writes a valid `<tool_call>` by itself, so the runs make it emit
scripted turns with a transformers `LogitsProcessor` added to the model's own `generate` (the
least invasive hook: TRL's tool loop, parsing, tool execution, masking, rewards and loss run
unchanged; only which token gets sampled is decided by the script). One rollout per group is
left free (random text).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from forkserver import run_script
from script_modules import load_script
from transformers import LogitsProcessor, LogitsProcessorList

from tests.support.recipes import stderr_tail

ROOT = Path(__file__).resolve().parents[1]

SUB_QUERIES = [
    ("Which river flows through the city of Lyon?", "Rhône"),
    ("What is the capital of the Rhône-Alpes region?", "Lyon"),
]
NUM_GENERATIONS = 4
FREE_ROW = 3  # this rollout of each group writes FREE_TOKENS random tokens, then ends its turn
FREE_TOKENS = 24

ReportText = Callable[[int, str, str], str]
"""(row of the second turn, reference answer, the tool response the row got) -> report text."""


def right_wrong_right(row: int, reference: str, tool_response: str) -> str:
    answer = reference if row % 2 == 0 else "not the answer"
    return f"<answer>{answer}</answer>\n<evidence>From the passages.</evidence>"


class ScriptedTurns(LogitsProcessor):
    """Forces row r to emit scripts[r][step] (None entries: the model samples freely)."""

    def __init__(self, scripts: list[list[int] | None], prompt_len: int):
        self.scripts, self.prompt_len = scripts, prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_len
        for row, script in enumerate(self.scripts):
            if script is not None and step < len(script) and script[step] is not None:
                scores[row] = -math.inf
                scores[row, script[step]] = 0.0
        return scores


class Script:
    """Turn 1: a search call (all rows but FREE_ROW). Turn 2: the report `report_text` writes."""

    def __init__(
        self,
        tokenizer,
        report_text: ReportText = right_wrong_right,
        sub_queries: list[tuple[str, str]] = SUB_QUERIES,
    ):
        self.tok = tokenizer
        self.report_text = report_text
        self.sub_queries = sub_queries
        self.response_id = tokenizer.convert_tokens_to_ids("<tool_response>")
        self.first_turns: list[list[int]] = []
        self.second_turns: list[list[int]] = []

    def ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def for_row(self, row: int, prompt: list[int]) -> list[int | None]:
        text = self.tok.decode(prompt)
        sub_query, reference = next((q, a) for q, a in self.sub_queries if q in text)
        if self.response_id not in prompt:  # first turn
            if row % NUM_GENERATIONS == FREE_ROW:
                return [None] * FREE_TOKENS + [self.tok.convert_tokens_to_ids("<|im_end|>")]
            ids = self.ids(
                f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{sub_query}"}}}}\n</tool_call><|im_end|>'
            )
            self.first_turns.append(ids)
            return ids
        response = re.findall(r"<tool_response>\n?(.*?)\n?</tool_response>", text, re.S)[-1]
        ids = self.ids(self.report_text(row, reference, response) + "<|im_end|>")
        self.second_turns.append(ids)
        return ids


def install_script(model, script: Script) -> None:
    original = model.generate

    def generate(input_ids=None, attention_mask=None, **kwargs):
        prompts = [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention_mask, strict=True)]
        scripts = [script.for_row(i, p) for i, p in enumerate(prompts)]
        processors = LogitsProcessorList([ScriptedTurns(scripts, input_ids.shape[1])])
        return original(
            input_ids=input_ids, attention_mask=attention_mask, logits_processor=processors, **kwargs
        )

    model.generate = generate


def load_recipe(name: str):
    """`recipes/<name>.py` as a module (its `main` and `parse_args` run in this process)."""
    return load_script(f"recipes/{name}.py")


def run_recipe(name: str, *args: str, expect: int = 0, timeout: int = 1200):
    """`python recipes/<name>.py ARGS` in a subprocess from the repository root; checks its exit status."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRL_EXPERIMENTAL_SILENCE": "1", "HF_HUB_OFFLINE": "1"}
    proc = run_script(
        [sys.executable, str(ROOT / "recipes" / f"{name}.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == expect, (
        f"{name} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{stderr_tail(proc.stderr)}"
    )
    return proc


def build_world_index(path: Path) -> Path:
    """A BM25 index directory over the sample world's corpus (data/world/corpus.jsonl)."""
    from executor_sft.retrieval import build_index

    build_index(ROOT / "data" / "world" / "corpus.jsonl", path, bm25=True)
    return path


def make_sft_output(root: Path) -> Path:
    """An SFT output directory as a user has it: `recipes/sft_executor.py` run as a command
    (tiny Qwen3, one step on two rows of data/sft.jsonl, to keep the time down)."""
    rows = (ROOT / "data" / "sft.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:2]
    (root / "sft.jsonl").write_text("".join(rows), encoding="utf-8")
    out = root / "out"
    run_recipe(
        "sft_executor",
        "--model_name_or_path", "offline:tiny-qwen3",
        "--dataset_name", str(root / "sft.jsonl"),
        "--max_steps", "1",
        "--max_length", "2048",
        "--output_dir", str(out),
    )  # fmt: skip
    return out

"""The model card: final loss, licence, intended use and limitations, data references a reader
elsewhere can follow, and the training procedure with TRL's and transformers' versions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import transformers
import trl
from rowgen import make_rows, write_jsonl
from trl import ModelConfig, SFTConfig

from executor_sft.sft import DEFAULT_SFT_DATA
from executor_sft.sft.card import data_reference, executor_card_section, model_card
from executor_sft.sft.train import SFTScriptArguments, train_executor

REPO = Path(__file__).resolve().parents[2]
COUNTS = {"stratum": {"single_search": 63, "info_gain_multi_search": 16}, "dataset": {"synthetic": 79}}
LENGTHS = {"max_length": 1024, "rows": 79, "truncated": 3}
ROW = {
    "messages": [
        {"role": "system", "content": "You are a research sub-agent."},
        {"role": "user", "content": "Who?"},
    ],
    "tools": [],
}
HISTORY = [
    {"loss": 0.7, "step": 7},
    {"loss": 0.612345, "step": 8},
    {"train_loss": 0.5914157461374998, "step": 8, "train_runtime": 47.0},
]


def _card(base_model: str, data_source: str, log_history=HISTORY, max_steps: int = 8) -> str:
    record = executor_card_section(
        data_source=data_source,
        row_counts=COUNTS,
        composition_report=None,
        length_summary=LENGTHS,
        config={"model": base_model, "max_steps": max_steps},
    )
    return model_card(
        title="sft-default",
        base_model=base_model,
        model_dir="outputs/sft-default",
        first_row=ROW,
        record=record,
        log_history=log_history,
    )


def test_the_embedded_default_card_says_smoke_model_loss_licence_and_procedure():
    card = _card("offline:smollm2", str(DEFAULT_SFT_DATA))
    assert "license: apache-2.0" in card.split("---")[1]  # Hub metadata
    assert "## Licence" in card and "Apache-2.0" in card.split("## Licence")[1]
    use = card.split("## Intended use and limitations")[1].split("## Quick start")[0]
    assert "smoke-test model" in use and "8 steps" in use and "fictional world" in use
    assert "- final loss (step 8): 0.6123" in card
    assert "(`train_loss`): 0.5914\n" in card and "0.59141" not in card
    assert "Data: `data/sft.jsonl` — 79 rows" in card
    assert str(REPO) not in card and "/work/" not in card
    procedure = card.split("## Training procedure")[1].split("## Licence")[0]
    assert f"TRL {trl.__version__}" in procedure and f"Transformers {transformers.__version__}" in procedure
    assert "SFTTrainer" in procedure
    order = [
        card.index(h) for h in ("# sft-default", "## Intended use", "## Quick start", "## Training outcome")
    ]
    assert order == sorted(order)


def test_an_unknown_base_model_and_outside_data_get_generic_text(tmp_path):
    data = write_jsonl(tmp_path / "elsewhere" / "sft.jsonl", make_rows(2, seed=1))
    card = _card("some-org/some-model", str(data), log_history=[], max_steps=500)
    assert "license:" not in card.split("---")[1]
    assert "check the base model's licence" in card
    use = card.split("## Intended use and limitations")[1]
    assert "Intended use:" in use and "Limitations:" in use and "500 steps" in use and "smoke" not in use
    assert "Data: `sft.jsonl` (a local file)" in card and str(tmp_path) not in card
    assert "## Training outcome" not in card  # no log, no made-up loss


def test_data_references():
    assert (
        data_reference("org/executor-rows")
        == "[org/executor-rows](https://huggingface.co/datasets/org/executor-rows)"
    )
    assert data_reference(str(REPO / "data" / "sft.jsonl")) == "`data/sft.jsonl`"
    assert data_reference("data/sft.jsonl") == "`data/sft.jsonl`"
    assert model_card(
        title="t", base_model="Qwen/Qwen3-1.7B", model_dir="m", first_row={}, record=""
    ).startswith(
        "---\nlibrary_name: transformers\ntags: [executor_sft, sft, trl, search-agent]\nlicense: apache-2.0\n"
    )


@pytest.mark.slow
def test_a_trained_card_has_the_final_loss_of_its_run(tmp_path):
    data = write_jsonl(tmp_path / "sft.jsonl", make_rows(4, seed=3, passage_words=5))
    args = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=2,
        max_length=1024,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    result = train_executor(
        SFTScriptArguments(dataset_name=str(data)), args, ModelConfig("offline:tiny-qwen3")
    )
    card = (tmp_path / "out" / "README.md").read_text()
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    last = [h for h in state["log_history"] if "loss" in h][-1]
    assert f"- final loss (step 2): {last['loss']:.4g}" in card
    assert f"(`train_loss`): {result.metrics['train_loss']:.4g}" in card
    assert "license: apache-2.0" in card and "random weights made by executor_sft" in card
    assert re.search(r"Framework versions: TRL \d", card)
    assert "Data: `sft.jsonl` (a local file)" in card or f"Data: `{data.relative_to(Path.cwd())}`" in card

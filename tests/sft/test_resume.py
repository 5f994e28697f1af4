"""What a resume continues: complete checkpoints only, the run's own data and settings, and a
train_loss over every step. In process, on a real tiny run's checkpoints."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from rowgen import make_rows, write_jsonl
from trl import ModelConfig, SFTConfig

from executor_sft.errors import InputError, MissingFileError
from executor_sft.sft.identity import run_identity
from executor_sft.sft.train import SFTScriptArguments, train_executor
from executor_sft.training.checkpoints import checkpoint_problems, last_complete_checkpoint
from executor_sft.training.run_record import RUN_RECORD, ResumeChangedError, identity_changes


def _args(out: Path, **overrides) -> SFTConfig:
    values = dict(
        output_dir=str(out), max_steps=2, per_device_train_batch_size=1, learning_rate=3e-3,
        lr_scheduler_type="constant", warmup_steps=0, max_length=1024, logging_steps=1,
        save_strategy="steps", save_steps=1, report_to="none", bf16=False, use_cpu=True,
        gradient_checkpointing=False, disable_tqdm=True, seed=0,
    )  # fmt: skip
    return SFTConfig(**{**values, **overrides})


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "sft.jsonl", make_rows(8, seed=3, passage_words=5))


@pytest.fixture(scope="module")
def run(tmp_path_factory, data) -> Path:
    """A finished 2-step run with checkpoint-1 and checkpoint-2."""
    out = tmp_path_factory.mktemp("run") / "out"
    train_executor(SFTScriptArguments(dataset_name=str(data)), _args(out), ModelConfig("offline:tiny-qwen3"))
    return out


@pytest.fixture()
def no_model(monkeypatch):
    """Loading a model fails the test: what is checked must be checked before."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("executor_sft.sft.train.load_tokenizer_and_model", refuse)


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(run, out)
    return out


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "problems"),
    [
        (lambda c: (c / "trainer_state.json").unlink(), ["trainer_state.json"]),
        (lambda c: (c / "trainer_state.json").write_text('{"global_st'), ["trainer_state.json"]),
        (lambda c: (c / "model.safetensors").unlink(), ["model weights"]),
        (lambda c: _cut(c / "model.safetensors"), ["model.safetensors (cut short)"]),
        (lambda c: _cut(c / "optimizer.pt"), ["optimizer.pt (cut short)"]),
        (lambda c: (c / "scheduler.pt").unlink(), ["scheduler state"]),
        (lambda c: (c / RUN_RECORD).unlink(), [RUN_RECORD]),
        (lambda c: _cut(c / RUN_RECORD), [RUN_RECORD]),
    ],
    ids=[
        "no-state",
        "torn-state",
        "no-weights",
        "weights-cut",
        "optimizer-cut",
        "no-scheduler",
        "no-record",
        "torn-record",
    ],  # fmt: skip
)
def test_an_incomplete_checkpoint_is_skipped_for_the_one_before(run, tmp_path, caplog, damage, problems):
    out = _copy(run, tmp_path)
    assert checkpoint_problems(out / "checkpoint-2") == []
    assert last_complete_checkpoint(out) == str(out / "checkpoint-2")
    damage(out / "checkpoint-2")
    assert checkpoint_problems(out / "checkpoint-2", with_record=True) == problems
    with caplog.at_level(logging.WARNING, logger="executor_sft.training.checkpoints"):
        assert last_complete_checkpoint(out) == str(out / "checkpoint-1")
    assert (
        f"skipping incomplete checkpoint {out}/checkpoint-2 (missing or damaged: {', '.join(problems)})"
        in caplog.text
    )


@pytest.mark.slow
def test_a_checkpoint_saved_without_optimizer_is_complete_when_the_run_saves_only_models(run, tmp_path):
    out = _copy(run, tmp_path)
    (out / "checkpoint-2" / "optimizer.pt").unlink()
    (out / "checkpoint-2" / "scheduler.pt").unlink()
    assert checkpoint_problems(out / "checkpoint-2") == ["optimizer state", "scheduler state"]
    assert checkpoint_problems(out / "checkpoint-2", with_optimizer=False) == []


@pytest.mark.slow
def test_an_explicit_incomplete_or_missing_checkpoint_is_a_user_error_before_the_model_loads(
    run, data, tmp_path, no_model
):
    out = _copy(run, tmp_path)
    (out / "checkpoint-2" / "trainer_state.json").unlink()
    script = SFTScriptArguments(dataset_name=str(data))
    args = _args(out, max_steps=3, resume_from_checkpoint=str(out / "checkpoint-2"))
    with pytest.raises(
        InputError, match=r"checkpoint-2: incomplete checkpoint \(missing or damaged: trainer_state"
    ):
        train_executor(script, args, ModelConfig("offline:tiny-qwen3"))
    args = _args(out, max_steps=3, resume_from_checkpoint=str(out / "checkpoint-9"))
    with pytest.raises(MissingFileError, match="checkpoint-9: checkpoint folder not found"):
        train_executor(script, args, ModelConfig("offline:tiny-qwen3"))


@pytest.mark.slow
def test_a_changed_resume_is_refused_before_the_model_loads_and_length_or_memory_settings_are_not_changes(
    run, data, tmp_path, no_model
):
    out = _copy(run, tmp_path)
    script = SFTScriptArguments(dataset_name=str(data))
    with pytest.raises(ResumeChangedError) as exc:
        train_executor(script, _args(out, max_steps=3, learning_rate=1e-3), ModelConfig("offline:tiny-qwen3"))
    assert str(exc.value).startswith(f"{out}/checkpoint-2: was trained with other settings than this run: ")
    assert "learning_rate (0.003 -> 0.001);" in str(exc.value) and "data (" not in str(exc.value)
    thinking = SFTScriptArguments(dataset_name=str(data), enable_thinking=True)
    with pytest.raises(ResumeChangedError, match=r"enable_thinking \(false -> true\)"):
        train_executor(thinking, _args(out, max_steps=3), ModelConfig("offline:tiny-qwen3"))
    # A longer run with gradient checkpointing and a finer save schedule is the same training: it
    # gets past every check to the model load.
    same = _args(out, max_steps=3, gradient_checkpointing=True, save_steps=5, logging_steps=2)
    with pytest.raises(AssertionError, match="the model was loaded"):
        train_executor(script, same, ModelConfig("offline:tiny-qwen3"))


@pytest.mark.slow
def test_a_torn_final_trainer_state_means_unfinished_and_the_last_checkpoint_resumes(
    run, data, tmp_path, no_model, caplog
):
    out = _copy(run, tmp_path)
    (out / "trainer_state.json").write_text('{"global_step": 2, "log_hi')
    with caplog.at_level(logging.WARNING), pytest.raises(AssertionError, match="the model was loaded"):
        train_executor(
            SFTScriptArguments(dataset_name=str(data)), _args(out), ModelConfig("offline:tiny-qwen3")
        )
    assert (
        "trainer_state.json is unreadable" in caplog.text
        and f"resuming from {out}/checkpoint-2" in caplog.text
    )


def test_the_identity_counts_the_global_batch_not_its_split(data, tmp_path):
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    script, model = SFTScriptArguments(), ModelConfig("offline:tiny-qwen3")
    two_by_one = run_identity(script, _args(tmp_path, per_device_train_batch_size=2), model, rows, None)
    one_by_two = run_identity(
        script,
        _args(tmp_path, per_device_train_batch_size=1, gradient_accumulation_steps=2),
        model,
        rows,
        None,
    )
    assert identity_changes(two_by_one, one_by_two) == {}
    four = run_identity(script, _args(tmp_path, per_device_train_batch_size=4), model, rows, None)
    assert identity_changes(two_by_one, four) == {"global_batch": "2 -> 4"}
    fewer = run_identity(script, _args(tmp_path), model, rows[:-1], None)
    assert list(identity_changes(two_by_one, fewer)) == ["data", "global_batch"]
    assert identity_changes(two_by_one, fewer)["data"].startswith("8 rows sha256:")


@pytest.mark.slow
def test_train_loss_of_a_resumed_run_spans_every_step_even_without_a_run_record(data, tmp_path, caplog):
    script, model = SFTScriptArguments(dataset_name=str(data)), ModelConfig("offline:tiny-qwen3")
    whole = train_executor(script, _args(tmp_path / "whole", max_steps=4, save_strategy="no"), model)
    out = tmp_path / "out"
    first = train_executor(script, _args(out, save_steps=2), model)
    (out / "checkpoint-2" / RUN_RECORD).unlink()  # a checkpoint made by plain TRL: only its logged losses
    explicit = _args(out, max_steps=4, save_steps=2, resume_from_checkpoint=str(out / "checkpoint-2"))
    with pytest.raises(ResumeChangedError, match=f"{RUN_RECORD} is missing or damaged"):
        train_executor(script, explicit, model)  # nothing tells what it was trained with
    script.resume_with_changes = True
    with caplog.at_level(logging.WARNING, logger="executor_sft.training.run_record"):
        resumed = train_executor(script, explicit, model)
    assert resumed.resumed_from == str(out / "checkpoint-2")
    assert f"{out}/checkpoint-2 has no readable {RUN_RECORD}: resuming it with these settings" in caplog.text
    assert resumed.metrics["train_loss"] == pytest.approx(whole.metrics["train_loss"], rel=1e-6)
    assert first.metrics["train_loss"] != pytest.approx(whole.metrics["train_loss"], rel=1e-3)
    record = json.loads((out / RUN_RECORD).read_text())
    assert record["global_step"] == 4
    assert record["loss_sum"] / 4 == pytest.approx(whole.metrics["train_loss"], rel=1e-6)
    assert resumed.length_report.rows == 8

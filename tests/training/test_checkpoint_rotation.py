"""`save_total_limit` never leaves an output folder without a complete checkpoint to resume.

The Trainer deletes the older checkpoints inside its save, before the run record goes into the new
one; with a limit of 1 a kill at that moment left nothing complete and the relaunch began at step 0.
Checked on a real tiny SFT run: a callback that the Trainer calls at each save before the record's
looks at the folder as a kill at that moment would leave it.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback
from trl import ModelConfig, SFTConfig

from executor_sft.sft.train import SFTScriptArguments, train_executor
from executor_sft.training.checkpoints import last_complete_checkpoint

ROWS = Path(__file__).parents[2] / "data" / "sft.jsonl"


class ResumableAtEachSave(TrainerCallback):
    """Notes, at each save, the checkpoint a relaunch killed right then would resume from."""

    def __init__(self) -> None:
        self.seen: dict[int, str | None] = {}

    def on_save(self, args, state, control, **kwargs):
        found = last_complete_checkpoint(args.output_dir)
        self.seen[state.global_step] = Path(found).name if found else None


def test_a_limit_of_one_keeps_the_older_checkpoint_until_the_new_one_is_complete(tmp_path):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(ROWS.read_text(encoding="utf-8").splitlines(keepends=True)[:4]), encoding="utf-8")
    out = tmp_path / "out"
    args = SFTConfig(
        output_dir=str(out), max_steps=3, per_device_train_batch_size=1, learning_rate=1e-3,
        lr_scheduler_type="constant", warmup_steps=0, max_length=4096, logging_steps=1,
        save_strategy="steps", save_steps=1, save_total_limit=1, report_to="none", bf16=False,
        use_cpu=True, gradient_checkpointing=False, disable_tqdm=True, seed=0,
    )  # fmt: skip
    watch = ResumableAtEachSave()
    train_executor(
        SFTScriptArguments(dataset_name=str(data)), args, ModelConfig("offline:tiny-qwen3"), callbacks=[watch]
    )

    # At step N's save, before its record: checkpoint-(N-1) is still there and complete.
    assert watch.seen == {1: None, 2: "checkpoint-1", 3: "checkpoint-2"}
    # The limit still holds once each new checkpoint is complete, and the user's setting is theirs again.
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3"]
    assert args.save_total_limit == 1

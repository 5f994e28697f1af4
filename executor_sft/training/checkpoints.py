"""Which `checkpoint-N/` folders in an output_dir can be resumed from, and whether a run is finished.

A process killed while the Trainer saves leaves a folder with only some of its files. A
checkpoint is complete when `trainer_state.json` is readable, the run record
(`executor_sft_run.json`) is readable, the weights and the optimizer/scheduler state are there
(in whichever form the run's backend saved them), and safetensors and torch files are whole. A
finished run's folder must hold a whole model that opens (its `config.json` and weights).
"""

from __future__ import annotations

import json
import logging
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

from executor_sft.errors import InputError, MissingFileError
from executor_sft.training.identity import RUN_RECORD

logger = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "pytorch_model_fsdp.bin",
    "pytorch_model_fsdp_0",
)
_OPTIMIZER = ("optimizer.pt", "optimizer.bin", "optimizer_0")
_SCHEDULER = ("scheduler.pt",)


def checkpoint_step(path: str | Path) -> int | None:
    match = _CHECKPOINT.match(Path(path).name)
    return int(match.group(1)) if match else None


def checkpoint_problems(
    path: str | Path, *, with_optimizer: bool = True, with_record: bool = False
) -> list[str]:
    """What a checkpoint folder lacks for a resume (empty: complete); `with_record`: the run
    record too (every checkpoint of ours has one; a plain TRL checkpoint has none)."""
    path = Path(path)
    problems = []
    if not _readable_state(path / "trainer_state.json"):
        problems.append("trainer_state.json")
    if with_record and not _readable_json(path / RUN_RECORD):
        problems.append(RUN_RECORD)
    # DeepSpeed keeps weights, optimizer and scheduler in its own `global_stepN/` folder.
    deepspeed = any(p.is_dir() and any(p.iterdir()) for p in path.glob("global_step*"))
    if not deepspeed and not any((path / name).exists() for name in _WEIGHTS):
        problems.append("model weights")
    if with_optimizer and not deepspeed:
        for what, names in (("optimizer state", _OPTIMIZER), ("scheduler state", _SCHEDULER)):
            if not any((path / name).exists() for name in names):
                problems.append(what)
    problems += [f"{name} (a shard)" for name in _missing_shards(path)]
    problems += [f"{p.name} (cut short)" for p in sorted(path.iterdir()) if p.is_file() and not _whole(p)]
    return problems


def last_complete_checkpoint(
    output_dir: str | Path, *, with_optimizer: bool = True, with_record: bool = True
) -> str | None:
    """The highest-numbered complete checkpoint in `output_dir`; incomplete ones above it are
    skipped with a warning."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    found = sorted(
        (step, p) for p in output_dir.iterdir() if p.is_dir() and (step := checkpoint_step(p)) is not None
    )
    for _, path in reversed(found):
        problems = checkpoint_problems(path, with_optimizer=with_optimizer, with_record=with_record)
        if not problems:
            return str(path)
        logger.warning(
            "skipping incomplete checkpoint %s (missing or damaged: %s); a process was probably "
            "stopped while saving it",
            path,
            ", ".join(problems),
        )
    return None


def drop_checkpoints(output_dir: str | Path) -> list[str]:
    """Delete the `checkpoint-*` folders in `output_dir`, for a run started over in it: the
    earlier run's higher-numbered checkpoints would outlive the new run's under rotation (it keeps
    the highest steps), and a resume after a kill would continue the earlier run."""
    import shutil

    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    dropped = sorted(str(p) for p in output_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None)
    for path in dropped:
        shutil.rmtree(path)
    return dropped


def _readable_json(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def _readable_state(path: Path) -> bool:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(state, dict) and isinstance(state.get("global_step"), int)


def _missing_shards(path: Path) -> list[str]:
    index = path / "model.safetensors.index.json"
    if not index.is_file():
        return []
    try:
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        return [index.name]
    return sorted(name for name in shards if not (path / name).is_file())


def _whole(path: Path) -> bool:
    """False for a safetensors or torch file cut short; other files are not checked."""
    if path.suffix == ".safetensors":
        return _whole_safetensors(path)
    if path.suffix in {".pt", ".pth", ".bin"}:
        return zipfile.is_zipfile(path)  # torch.save writes a zip; its directory comes last
    return True


def _whole_safetensors(path: Path) -> bool:
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if 8 + header_len > size:
                return False
            header = json.loads(f.read(header_len))
    except (OSError, struct.error, ValueError):
        return False
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    return 8 + header_len + max(ends, default=0) <= size


def finished_run(output_dir: str | Path, max_steps: int, num_train_epochs: float) -> dict[str, Any] | None:
    """The saved state of a run in `output_dir` that reached the requested length, else None."""
    state_path = Path(output_dir) / "trainer_state.json"
    if not state_path.is_file():
        return None
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        logger.warning(
            "%s is unreadable (a process stopped while writing it): the run is not finished", state_path
        )
        return None
    step, epoch = state.get("global_step", 0), state.get("epoch") or 0.0
    done = step >= max_steps if max_steps > 0 else epoch >= num_train_epochs
    if not (done and step > 0):
        return None
    if problems := final_model_problems(output_dir):
        logger.warning(
            "%s reached step %d but its model is damaged (%s): the run is not finished",
            output_dir,
            step,
            ", ".join(problems),
        )
        return None
    return state


def final_model_problems(output_dir: str | Path) -> list[str]:
    """What keeps the saved model in `output_dir` from opening (empty: it opens)."""
    path = Path(output_dir)
    problems = [] if _readable_json(path / "config.json") or _is_adapter(path) else ["config.json"]
    return problems + [
        p for p in checkpoint_problems(path, with_optimizer=False) if p != "trainer_state.json"
    ]


def _is_adapter(path: Path) -> bool:
    return _readable_json(path / "adapter_config.json")


def check_resume_checkpoint(path: str | Path, *, with_optimizer: bool) -> None:
    """An explicit `--resume_from_checkpoint` must be a complete checkpoint folder."""
    if not Path(path).is_dir():
        raise MissingFileError(f"{path}: checkpoint folder not found (--resume_from_checkpoint)")
    if problems := checkpoint_problems(path, with_optimizer=with_optimizer):
        raise InputError(
            f"{path}: incomplete checkpoint (missing or damaged: {', '.join(problems)}); "
            "pass a complete one to --resume_from_checkpoint"
        )


def finished_message(output_dir: str | Path, state: dict[str, Any], loss_key: str = "train_loss") -> str:
    """The one line a relaunched finished run prints."""
    loss = next((h[loss_key] for h in reversed(state.get("log_history", [])) if loss_key in h), None)
    shown = "unknown" if loss is None else f"{loss:.4g}"
    return (
        f"[executor_sft] {output_dir} already holds a finished run (step {state['global_step']}, "
        f"{loss_key}={shown}); nothing to do. Pass --fresh true to train again."
    )

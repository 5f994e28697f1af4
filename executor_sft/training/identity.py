"""What makes two trainings the same: fingerprints of the data and the base model, and the settings.

A run's identity is compared on every relaunch and resume (`training.run_record`): the same
identity continues the run, another one is a different training. Length (max_steps,
num_train_epochs) is never part of it (extending a run is what a resume is for), nor are memory
and speed settings (gradient checkpointing, attention kernel, compile).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

RUN_RECORD = "executor_sft_run.json"

OPTIMIZER_FIELDS = (
    "learning_rate",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_steps",
    "warmup_ratio",
    "weight_decay",
    "optim",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "bf16",
    "fp16",
    "seed",
    "data_seed",
)
"""Training arguments every stage shares whose change mid-run makes another training."""


def data_fingerprint(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Rows' count and content hash: the same rows give the same fingerprint wherever the file lies."""
    digest, count = hashlib.sha256(), 0
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
        digest.update(b"\n")
        count += 1
    return {"rows": count, "sha256": digest.hexdigest()}


def files_fingerprint(paths: Iterable[str | Path]) -> dict[str, Any]:
    """The content hash of local files (a name that is not a local file, a Hub id, counts by name)."""
    digest, names = hashlib.sha256(), []
    for path in map(Path, paths):
        names.append(path.name)
        if path.is_file():
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        else:
            digest.update(f"name:{path}".encode())
        digest.update(b"\0")
    return {"files": names, "sha256": digest.hexdigest()}


def model_fingerprint(name_or_path: str | None) -> str | None:
    """What a base model is, cheaply: a Hub id or alias is its name; a local folder is its
    config, the names, sizes and tensor headers of its weight files, and, where one of our runs
    made it, that run's identity and step (so a model retrained in place is another base)."""
    if not name_or_path:
        return None
    path = Path(name_or_path)
    if not path.is_dir():
        return str(name_or_path)
    digest = hashlib.sha256()
    for part in sorted(path.iterdir()):
        if part.name == "config.json" or part.name == RUN_RECORD:
            digest.update(part.name.encode() + b"\0" + _readable_bytes(part))
        elif part.suffix in {".safetensors", ".bin"} and part.is_file():
            digest.update(f"{part.name}:{part.stat().st_size}".encode() + _safetensors_header(part))
    return f"{path.name}@sha256:{digest.hexdigest()[:16]}"


def _readable_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b"unreadable"


def _safetensors_header(path: Path) -> bytes:
    """The tensor names, shapes and offsets (not the values: hashing gigabytes on every launch costs seconds)."""
    if path.suffix != ".safetensors":
        return b""
    try:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            return f.read(min(length, 1 << 26))
    except (OSError, struct.error):
        return b"unreadable"


def settings_of(args: Any, names: Iterable[str]) -> dict[str, Any]:
    """The named attributes of an arguments object that has them (TRL versions differ)."""
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def global_batch(training_args: Any) -> int:
    return (
        training_args.per_device_train_batch_size
        * training_args.gradient_accumulation_steps
        * max(1, training_args.world_size)
    )


def peft_settings(model_args: Any) -> dict[str, Any] | None:
    if not getattr(model_args, "use_peft", False):
        return None
    return {
        "r": model_args.lora_r,
        "alpha": model_args.lora_alpha,
        "dropout": model_args.lora_dropout,
        "target_modules": model_args.lora_target_modules,
        "modules_to_save": model_args.lora_modules_to_save,
    }


def base_identity(training_args: Any, model_args: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The identity every stage shares: data, base model (name and fingerprint), dtype, LoRA,
    the global batch and the optimiser's settings. A stage adds its own settings to it."""
    return {
        "data": data,
        "model": model_args.model_name_or_path,
        "model_fingerprint": model_fingerprint(model_args.model_name_or_path),
        "model_revision": getattr(model_args, "model_revision", None),
        "dtype": getattr(model_args, "dtype", None),
        "peft": peft_settings(model_args),
        "global_batch": global_batch(training_args),
        **settings_of(training_args, OPTIMIZER_FIELDS),
    }


def as_recorded(identity: dict[str, Any]) -> dict[str, Any]:
    """The identity as it reads back from the record (enums as values, paths as strings)."""
    return json.loads(json.dumps(identity, default=_plain))


def _plain(value: Any) -> Any:
    return getattr(value, "value", str(value))

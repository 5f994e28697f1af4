"""Whether a model or tokenizer named in a config can be loaded here, asked before anything loads.

A name is an offline alias (`offline:smollm2`), a local path, or a hub id. A local model folder
must hold what the loader reads (a config, weights, a tokenizer), so an empty folder or a training
run that has not finished is refused here, not after a minute of loading. A hub id must be in the
local hub cache or on a hub that answers now (`executor_sft.llm.hub`).
"""

from __future__ import annotations

import re
from pathlib import Path

from executor_sft.cache import CacheError, cache_dir
from executor_sft.errors import ConfigError
from executor_sft.llm.hub import hub_model_problem

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
"""`name` or `org/name`, as the hub spells repository ids."""


def source_problem(name: str, what: str = "model") -> str | None:
    """None when `name` can be loaded as a `what` ("model" or "tokenizer"), else what to do."""
    from executor_sft.llm.offline import OFFLINE_MODELS, is_offline

    if is_offline(name):
        known = [a for a, m in OFFLINE_MODELS.items() if what != "model" or m.load is not None]
        if name not in known:
            return f"{name}: no such offline {what}; known: {', '.join(known)}"
        try:
            cache_dir()  # where offline models are converted to (or read from)
        except CacheError as exc:
            return str(exc)
        return None
    path = Path(name).expanduser()
    if path.exists():
        return folder_problem(path, what)
    if not HUB_ID.match(name) or name.startswith((".", "~")):
        return f"{name}: no such directory; give the directory a training run wrote, or a hub id"
    return hub_model_problem(name, what)


WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "adapter_model.*")
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def folder_problem(path: Path, what: str = "model") -> str | None:
    """None when local `path` holds what a loader of a `what` reads, else what is missing and why."""
    if not path.is_dir():
        return f"{path}: is a file, not a model folder; give the folder a training run wrote"
    wants = {"tokenizer (tokenizer.json)": TOKENIZER}
    if what == "model":
        wants = {
            "config.json": ("config.json", "adapter_config.json"),
            "weights (*.safetensors)": WEIGHTS,
            **wants,
        }
    missing = [label for label, names in wants.items() if not any(next(path.glob(n), None) for n in names)]
    if not missing:
        return None
    checkpoints = sorted(path.glob("checkpoint-*"), key=lambda p: (len(p.name), p.name))
    why = (
        f"a training run that has not finished (latest {checkpoints[-1].name}); let it finish, "
        f"or give {checkpoints[-1]}"
        if checkpoints
        else "give the folder a finished training run wrote (config, weights and tokenizer)"
    )
    return f"{path}: holds no {', no '.join(missing)}: {why}"


def check_source(name: str, flag: str, what: str = "model") -> None:
    """Raise a `ConfigError` naming `flag` (e.g. `--model_name_or_path`) when `name` cannot be loaded."""
    problem = source_problem(name, what)
    if problem is not None:
        raise ConfigError(f"{flag} {problem}")

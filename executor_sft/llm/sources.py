"""Whether a model or tokenizer named in a config can be loaded here, asked before anything loads.

A name is an offline alias (`offline:smollm2`), a local path, or a hub id. A hub id is taken
as loadable when it is in the local hub cache, or when the hub can be reached (`HF_HUB_OFFLINE`
unset): its download is then the loader's job, and a network check here would cost a request per
model for a run that is about to make it anyway.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from executor_sft.errors import ConfigError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
"""`name` or `org/name`, as the hub spells repository ids."""


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def source_problem(name: str, what: str = "model") -> str | None:
    """None when `name` can be loaded as a `what` ("model" or "tokenizer"), else what to do."""
    from executor_sft.llm.offline import OFFLINE_MODELS, is_offline

    if is_offline(name):
        known = [a for a, m in OFFLINE_MODELS.items() if what != "model" or m.load is not None]
        return None if name in known else f"{name}: no such offline {what}; known: {', '.join(known)}"
    path = Path(name).expanduser()
    if path.exists():
        return None
    if not HUB_ID.match(name) or name.startswith((".", "~")):
        return f"{name}: no such directory; give the directory a training run wrote, or a hub id"
    if not hub_offline() or _in_hub_cache(name, what):
        return None
    return (
        f"{name}: not a local directory and not in the hub cache, and HF_HUB_OFFLINE=1 forbids a download; "
        f"download it first (hf download {name}) or give a local directory"
    )


def check_source(name: str, flag: str, what: str = "model") -> None:
    """Raise a `ConfigError` naming `flag` (e.g. `--model_name_or_path`) when `name` cannot be loaded."""
    problem = source_problem(name, what)
    if problem is not None:
        raise ConfigError(f"{flag} {problem}")


def _in_hub_cache(repo_id: str, what: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    names = ("config.json",) if what == "model" else ("tokenizer_config.json", "tokenizer.json")
    return any(isinstance(try_to_load_from_cache(repo_id, n), str) for n in names)

"""Recipes and bench scripts as modules, for tests that call their functions in-process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(path: str, name: str | None = None) -> ModuleType:
    """`REPO/path` (e.g. "recipes/sft_executor.py") as a module, loaded once per test process.

    It is registered in `sys.modules` (as `name`, default "<folder>_<stem>": `recipes/evaluate.py`
    must not shadow the `evaluate` package): dataclasses resolve their annotations through it, and
    pickles of its classes and functions (spawned workers) find it."""
    file = REPO / path
    name = name or f"{file.parent.name}_{file.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module

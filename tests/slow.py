"""Where the quick loop (`pytest -m "not slow"`) draws its line: a test is slow when it takes more
than about 5 s on one core.

Starting a recipe that imports TRL takes about 6 s on a 2-core machine before it checks anything
(transformers, PEFT and their imports), so every test that launches one is slow, however little
it then does. The full suite (README command 2, CI) runs every test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

TRL_RECIPES = frozenset({"sft_executor", "grpo_executor", "distill_executor"})


def launches(recipe: str, *values: Any, id: str | None = None) -> Any:
    """`values` as one parametrize case, marked slow when `recipe` (a name or path) imports TRL."""
    marks = [pytest.mark.slow] if Path(recipe).stem in TRL_RECIPES else []
    return pytest.param(*values, marks=marks, id=id)

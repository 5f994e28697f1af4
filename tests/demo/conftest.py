"""Import the recipes (plain scripts) as modules for the demo tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"


def load_recipe(name: str):
    if str(RECIPES) not in sys.path:
        sys.path.insert(0, str(RECIPES))  # demo.py imports its sibling make_sample_data
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def sample_recipe():
    return load_recipe("make_sample_data")


@pytest.fixture(scope="session")
def demo_recipe():
    return load_recipe("demo")

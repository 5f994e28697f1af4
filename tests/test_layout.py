"""The test tree has no __init__.py files, so pytest needs every test module name to be unique."""

from collections import Counter
from pathlib import Path


def test_test_module_basenames_are_unique():
    tests = Path(__file__).parent
    names = Counter(p.name for p in tests.rglob("*.py") if p.name not in ("conftest.py", "__init__.py"))
    assert not [n for n, c in names.items() if c > 1], "rename test modules so basenames are unique"

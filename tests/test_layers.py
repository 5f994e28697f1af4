"""The package's import graph: layers point one way, no module cycles, tests' helpers stay out.

Imports inside functions count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "executor_sft"

LAYERS = {
    "__init__": 0,
    "schema": 0,
    "versions": 0,
    "cache": 0,
    "configfile": 0,
    "files": 0,
    "errors": 0,
    "recipe_main": 0,
    "safe_interrupt": 0,
    "failures": 0,
    "tool_protocol": 0,
    "urls": 0,
    "registry": 0,
    "store": 0,
    "store_lock": 0,
    "episode_runner": 0,
    "ray_runner": 0,
    "data": 1,
    "retrieval": 1,
    "llm": 1,
    "metrics": 1,
    "agents": 2,
    "preflight": 2,
    "runtime": 2,
    "training": 2,
    "rollout": 3,
    "filters": 3,
    "sft": 3,
    "grpo": 3,
    "distill": 3,
    "synthetic": 3,
    "eval": 4,
    "demos": 5,
}
"""Lower numbers are lower layers; a module may import its own layer or below."""

KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_CYCLES: list[set[str]] = []
"""Cycles still to remove; the test fails if one disappears without this list shrinking."""


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {_resolve(a.name, mods) for a in node.names if a.name.startswith("executor_sft")}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = (
                    ".".join([*base, node.module] if node.module else base) if node.level else node.module
                )
                if module and module.startswith("executor_sft"):
                    for alias in node.names:
                        full = f"{module}.{alias.name}"
                        targets.add(full if full in mods else _resolve(module, mods))
        graph[name] = targets - {name, ""}
    return graph


def _layer_of(module: str) -> tuple[str, int]:
    top = module.split(".")[1] if "." in module else "__init__"
    return top, LAYERS[top]


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_every_subpackage_has_a_layer():
    assert {_layer_of(m)[0] for m in import_graph()} <= set(LAYERS)


def test_imports_point_down_the_layers():
    upward = set()
    for module, targets in import_graph().items():
        top, layer = _layer_of(module)
        for target in targets:
            target_top, target_layer = _layer_of(target)
            if target_layer > layer:
                upward.add((top, target_top))
    assert upward == KNOWN_UPWARD


def test_no_import_cycles_between_modules():
    assert sorted(map(sorted, _cycles(import_graph()))) == sorted(map(sorted, KNOWN_CYCLES))


def test_production_code_never_imports_the_test_helpers():
    offenders = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            name == "tests" or name.startswith("tests.")
            for name in (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            )
        )
    )
    assert offenders == []


def test_the_layer_table_in_the_docs_is_the_one_enforced_here():
    """docs/architecture.md's "Package layers" table names every module at the layer above."""
    import re

    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    documented = {}
    for layer, modules in re.findall(r"^\| (\d) [^|]*\| ([^|]*) \|", doc, flags=re.MULTILINE):
        documented |= {name: int(layer) for name in re.findall(r"`([\w]+)`", modules)}
    assert documented == LAYERS

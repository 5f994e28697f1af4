"""Versions of the libraries a result depends on, for cache keys and results files.

A cached index or converted model is only valid for the library versions that made it, and a
committed figure only means something next to the versions it was measured with.
"""

from __future__ import annotations

import platform
from importlib import metadata

RESULT_PACKAGES = (
    "executor-sft",
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "tokenizers",
    "bm25s",
    "PyStemmer",
    "numpy",
)
"""Packages whose versions can change a committed result (sample data, demo, benches)."""


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def library_versions(packages: tuple[str, ...] = RESULT_PACKAGES) -> dict[str, str | None]:
    """{"python": "3.11.7", package: version or None if absent}."""
    return {"python": platform.python_version(), **{p: package_version(p) for p in packages}}

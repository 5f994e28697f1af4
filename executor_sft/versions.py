"""Versions of the libraries a result depends on, for cache keys and results files.

A cached index or converted model is only valid for the library versions that made it, and a
committed figure only means something next to the versions it was measured with.
"""

from __future__ import annotations

import hashlib
import json
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


def cache_key(*parts: object, packages: tuple[str, ...] = ()) -> str:
    """A short hash of `parts` and the versions of `packages`: a cache path component."""
    payload = json.dumps(
        [list(parts), {p: package_version(p) for p in packages}], sort_keys=True, default=str
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

"""A bench script's result files: the JSON record and the markdown report written from it.

Both carry the command as run and the load average at the end (the machine state a figure was
measured under: on 2 cores a second job slows the first 2-3x).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def provenance(script: str, argv: Sequence[str] | None) -> dict[str, Any]:
    """`command` (`python <script> <args>`) and `load_average` (1, 5 and 15 minutes)."""
    args = list(argv) if argv is not None else sys.argv[1:]
    return {
        "command": f"python {script} " + " ".join(args),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }


def write_results(
    path: str | Path, results: dict[str, Any], markdown: Callable[[dict[str, Any]], str]
) -> None:
    """`path`.json and `path`.md, the markdown also printed."""
    path = Path(path)
    path.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    report = markdown(results)
    path.with_suffix(".md").write_text(report, encoding="utf-8")
    print(report)


__all__ = ["provenance", "write_results"]

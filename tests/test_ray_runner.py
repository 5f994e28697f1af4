"""Without the ray extra the package imports and works; only engine ray says what to install."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
sys.modules["ray"] = None  # as if the ray extra were not installed
import executor_sft.rollout, executor_sft.eval
from executor_sft.errors import UserError
from executor_sft.ray_runner import import_ray
assert "ray" not in [m for m in sys.modules if sys.modules[m] is not None and m.split(".")[0] == "ray"]
try:
    import_ray()
except UserError as exc:
    print(exc)
"""


def test_the_package_imports_without_ray_and_engine_ray_names_the_extra():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    assert "pip install -e '.[ray]'" in out

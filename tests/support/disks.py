"""Real disk faults for tests: a small tmpfs that fills up, or one remounted read-only.

Mounting needs root (or CAP_SYS_ADMIN); where it is refused, the test is skipped with one line.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_tmpfs(directory: str | Path, size: str = "256k") -> Iterator[Path]:
    """Mount a tmpfs of `size` on `directory` (made if missing) for the block, then unmount it."""
    import pytest

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def remount(directory: str | Path, options: str) -> None:
    """Change a mounted tmpfs's options: `ro`, `rw`, `size=64m`."""
    subprocess.run(["mount", "-o", f"remount,{options}", str(directory)], check=True)

"""The check every user-mistake test makes: exit 2, no traceback, exactly one `error:` line."""

from __future__ import annotations

import subprocess

from tests.support.recipes import stderr_tail


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one `error:` line of a command that refused a user's mistake (asserts the rest)."""
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert "Traceback" not in proc.stderr, stderr_tail(proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr_tail(proc.stderr)
    return errors[0]

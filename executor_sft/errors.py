"""User errors apart from bugs: the one base class recipes catch, and the one way they report it.

A `UserError` is something the person running a command can fix (a path, a config value, a
malformed input row); its message is the single line to print, `<file>[:<line>]: <what to do>`.
Anything else is a bug and keeps its traceback: recipes catch `UserError` only.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class UserError(Exception):
    """Input the user can get wrong; `str(exc)` is the one line to print."""

    def lines(self) -> list[str]:
        """The `error:` lines to print: one, unless the error lists several problems."""
        return [str(self).replace("\n", " ")]


class ConfigError(UserError, ValueError):
    """A config file or option that cannot be used as written (missing, malformed, unknown key)."""


class PreflightError(ConfigError):
    """Everything a run would fail on before its first episode, found at once (`executor_sft.preflight`)."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems

    def lines(self) -> list[str]:
        return list(self.problems)


INTERRUPTED = (
    "interrupted: what finished is kept and nothing is left half-written; "
    "run the same command again to resume"
)
"""The line a recipe prints on Ctrl-C (SIGINT). True of every recipe: outputs are written
atomically, stores keep whole episodes, index builds and SFT keep their staging and checkpoints."""


class StoppedBySignal(Exception):
    """A run that stopped cleanly on a signal after keeping its work; the message says where it
    stands and how to go on. `exit_status` is 128 + the signal's number, as a shell reports it."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_status = 128 + signum


def first_local_process() -> bool:
    """False in the 2nd..Nth process a launcher started on this machine: each meets the same bad
    input, and one line says it (the others exit 2 silently)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def report_user_errors(fn: Callable[[], T]) -> T | int:
    """Run a recipe body; a `UserError` becomes `error: <message>` on stderr (a line per problem
    for a `PreflightError`) and exit status 2,
    Ctrl-C becomes `INTERRUPTED` and exit status 130 (no KeyboardInterrupt traceback)."""
    try:
        return fn()
    except UserError as exc:
        for line in exc.lines() if first_local_process() else ():
            print(f"error: {line}", file=sys.stderr)
        return 2
    except StoppedBySignal as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130


def say_on_sigterm(line: Callable[[], str]) -> None:
    """On SIGTERM print `line()` to stderr (what Ctrl-C would say), then die of the signal as
    before (exit status 143): what finished is as durable as after Ctrl-C, and a parent's workers
    still see it go. Main thread only."""

    def on_sigterm(signum: int, frame: object) -> None:
        print(line(), file=sys.stderr, flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)

"""User errors apart from bugs: the one base class for what a user can fix (`recipe_main` reports it).

A `UserError` is something the person running a command can fix (a path, a config value, a
malformed input row); its message is the single line to print, `<file>[:<line>]: <what to do>`.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path


class UserError(Exception):
    """Input the user can get wrong; `str(exc)` is the one line to print."""

    def lines(self) -> list[str]:
        """The `error:` lines to print: one, unless the error lists several problems."""
        return [str(self).replace("\n", " ")]


class ConfigError(UserError, ValueError):
    """A config file or option that cannot be used as written (missing, malformed, unknown key)."""


class InputError(UserError, ValueError):
    """An input file or its content that cannot be used; the message is `file[:line]: what to do`."""


class MissingFileError(UserError, FileNotFoundError):
    """A file the user named (a flag, a config field) does not exist; the message says how to get it."""


class MalformedLineError(InputError):
    """A JSONL line that is not a JSON object; the message names the file and line.

    `path` and `line` locate it and `problem` is the message without them (`invalid JSON (...)`);
    `unparsable`: the bytes are not UTF-8 JSON at all (as a writer killed mid-line leaves them).
    """

    def __init__(self, path: str | Path, line: int, problem: str, *, unparsable: bool = False):
        self.path, self.line, self.problem, self.unparsable = str(path), line, problem, unparsable
        super().__init__(f"{path}:{line}: {problem}")


class RowError(UserError, ValueError):
    """A row that cannot be used for training: its message says where and why.

    `RowError(message)` for a malformed SFT row (the message names the file, line and field);
    `RowError(reason, detail)` for a run the filter cannot turn into a row, where `reason` is
    the exclusion reason and the message is `reason: detail`.
    """

    def __init__(self, reason: str, detail: str | None = None):
        self.reason = reason if detail is not None else None
        super().__init__(reason if detail is None else f"{reason}: {detail}")


class OutputError(UserError, OSError):
    """An output the user named that cannot be written (full disk, read-only, a directory, ...).

    An `OSError` whose `errno` is the cause's, and whose message is the one line to print.
    """

    def __init__(self, code: int | None, message: str):
        super().__init__(message)
        self.errno = code


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


def say_on_sigterm(line: Callable[[], str]) -> None:
    """On SIGTERM print `line()` to stderr (what Ctrl-C would say), then die of the signal as
    before (exit status 143): what finished is as durable as after Ctrl-C, and a parent's workers
    still see it go. Main thread only."""

    def on_sigterm(signum: int, frame: object) -> None:
        print(line(), file=sys.stderr, flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)

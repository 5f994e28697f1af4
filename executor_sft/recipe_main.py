"""How every recipe ends: one exit status and at most one line a user can act on, whatever stopped it.

`run_recipe(main)` is each recipe's `__main__`, so a recipe's `main` only parses and calls the
library. A `UserError` or a full/read-only disk met while writing is one `error:` line, exit 2;
`StoppedBySignal` its `interrupted:` line and status; Ctrl-C `INTERRUPTED`, 130; SIGTERM the same
line then death by the signal (143), unless the run installs a handler that says more
(collection, training). Anything else is a bug and keeps its traceback (exit 1). Ctrl-C is
raised only where Python can unwind it (`safe_interrupt`): never dropped in a `__del__`, never an
abort inside an import.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from typing import NoReturn

from executor_sft.errors import INTERRUPTED, StoppedBySignal, UserError, first_local_process, say_on_sigterm
from executor_sft.files import as_output_error
from executor_sft.safe_interrupt import interrupts_at_safe_points

TERMINATED = "terminated (SIGTERM): " + INTERRUPTED.removeprefix("interrupted: ")
"""What SIGTERM prints where the run has nothing more precise to say."""


def run_recipe(main: Callable[..., object], *args: object, suffix: str = "") -> NoReturn:
    """Exit with `main(*args)`'s status (an int it returns, else 0); `suffix` ends each `error:` line."""
    before = signal.getsignal(signal.SIGTERM)
    say_on_sigterm(lambda: TERMINATED)
    try:
        status = _status(main, args, suffix)
    finally:
        signal.signal(signal.SIGTERM, before)
    _leave_process_group()
    sys.exit(status)


def _status(main: Callable[..., object], args: tuple, suffix: str) -> int:
    try:
        with interrupts_at_safe_points():
            result = main(*args)
    except StoppedBySignal as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except Exception as exc:
        error = exc if isinstance(exc, UserError) else _output_error(exc)
        if error is None:
            raise
        for line in error.lines() if first_local_process() else ():
            print(f"error: {line}{suffix}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


def _output_error(exc: BaseException) -> UserError | None:
    """A write failure behind `exc` as one line naming the file written; None for anything else."""
    seen: BaseException | None = exc
    while seen is not None and not (isinstance(seen, OSError) and seen.filename):
        seen = seen.__cause__ or seen.__context__
    target = seen.filename if seen is not None else "an output of this command"
    return as_output_error(target, exc)


def _leave_process_group() -> None:
    """Under a launcher with several processes, leave the torch process group before exit:
    gloo's threads torn down at interpreter exit can abort a rank after a finished run."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Around a recipe's top-level imports: a Ctrl-C in its first second is one line, exit 130."""
    try:
        with interrupts_at_safe_points():
            yield
    except KeyboardInterrupt:
        print("interrupted: nothing was started; run the same command again", file=sys.stderr)
        raise SystemExit(130) from None

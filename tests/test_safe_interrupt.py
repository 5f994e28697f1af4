"""A Ctrl-C that lands in a `__del__` or in a compiled extension's start is raised right after it,
not dropped or turned into a crash; anywhere else it is raised at once (the recipes' first
seconds; tests/test_early_ctrl_c.py runs them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from executor_sft.safe_interrupt import interrupts_at_safe_points, unsafe_to_raise
from tests.support.recipes import stderr_tail

ROOT = Path(__file__).resolve().parents[1]


class _CtrlCInDel:
    """Its `__del__` receives a SIGINT and keeps running Python for a while after it."""

    def __init__(self, record: list[str]):
        self.record = record

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # bytecode runs here, where the signal is handled
            pass
        self.record.append("__del__ finished")


def _drop(record: list[str]) -> None:
    _CtrlCInDel(record)  # dropped at once, so `__del__` runs inside this call
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        pass
    record.append("caller finished")


def test_ctrl_c_in_a_del_is_raised_after_it(monkeypatch):
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    record: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupts_at_safe_points():
        _drop(record)
    assert record == ["__del__ finished"]  # `__del__` ran whole, its caller stopped
    assert unraisable == []


def test_python_alone_drops_a_ctrl_c_in_a_del(monkeypatch):
    """Why the handler exists: Python's own handler raises inside `__del__`, where it is lost."""
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    record: list[str] = []
    try:
        _drop(record)
    finally:
        signal.signal(signal.SIGINT, before)
    assert record == ["caller finished"]  # the interrupt was lost: the caller ran on
    assert [type(u.exc_value) for u in unraisable] == [KeyboardInterrupt]


def test_ctrl_c_in_a_python_import_is_raised_in_it_at_once(tmp_path, monkeypatch):
    (tmp_path / "slow_module_for_ctrl_c.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(2.0)\nfinished = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupts_at_safe_points():
        import slow_module_for_ctrl_c  # noqa: F401
    assert time.monotonic() - started < 1.0
    assert "slow_module_for_ctrl_c" not in sys.modules


# pydantic-core (a Rust extension) imports `datetime` while it initialises. The finder runs while
# that import looks for `datetime`, so the Ctrl-C it sends lands inside the extension's start.
CTRL_C_IN_AN_EXTENSIONS_START = """
import os, signal, sys, time
{install}

class CtrlCWhileFindingDatetime:
    def find_spec(self, name, path=None, target=None):
        if name == "datetime":
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:
                pass
        return None

sys.modules.pop("datetime", None)
sys.meta_path.insert(0, CtrlCWhileFindingDatetime())
try:
    import pydantic_core
    time.sleep(5)
except KeyboardInterrupt:  # after the extension's start; perhaps inside pydantic_core's own Python
    print("KeyboardInterrupt after the extension started:", "pydantic_core._pydantic_core" in sys.modules)
"""


@pytest.mark.parametrize(
    ("install", "outcome"),
    [
        (
            "from executor_sft.safe_interrupt import interrupts_at_safe_points\n"
            "held = interrupts_at_safe_points()  # kept: a dropped one restores Python's handler\n"
            "held.__enter__()",
            "KeyboardInterrupt after the extension started: True",
        ),
        ("", "PanicException"),  # Python's own handler: the extension's start fails
    ],
    ids=["deferred", "python-alone"],
)
def test_ctrl_c_in_a_compiled_extensions_start_is_raised_after_it(install, outcome, tmp_path):
    pytest.importorskip("pydantic_core")
    script = tmp_path / "ctrl_c_in_extension.py"
    script.write_text(CTRL_C_IN_AN_EXTENSIONS_START.format(install=install))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert outcome in proc.stdout + proc.stderr, proc.stdout + stderr_tail(proc.stderr)


def test_a_second_ctrl_c_in_an_extensions_start_acts_at_once(tmp_path):
    pytest.importorskip("pydantic_core")
    script = tmp_path / "insisted.py"
    script.write_text(
        CTRL_C_IN_AN_EXTENSIONS_START.format(
            install="from executor_sft.safe_interrupt import interrupts_at_safe_points\n"
            "held = interrupts_at_safe_points()\nheld.__enter__()"
        ).replace(
            "            while time.monotonic() < deadline:\n                pass\n",
            "            while time.monotonic() < deadline:\n                pass\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n            time.sleep(3)\n",
        )
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert time.monotonic() - started < 2.5  # not the 3 s the finder would go on for
    assert "PanicException" in proc.stderr, proc.stdout + stderr_tail(proc.stderr)  # raised where it landed


def test_a_second_ctrl_c_in_a_del_waits_too(monkeypatch):
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    class TwiceInDel:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:
                pass

    with pytest.raises(KeyboardInterrupt), interrupts_at_safe_points():
        TwiceInDel()
        time.sleep(2.0)
    assert unraisable == []


def test_the_handler_is_restored_and_plain_code_is_interrupted_at_once():
    before = signal.getsignal(signal.SIGINT)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupts_at_safe_points():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2.0)
    assert time.monotonic() - started < 1.0
    assert signal.getsignal(signal.SIGINT) is before
    assert unsafe_to_raise(sys._getframe()) is None


def test_under_run_async_ctrl_c_cancels_the_main_task_and_its_cleanup_runs():
    """asyncio's own handling: the coroutine sees CancelledError at its await and finishes its
    cleanup (a progress bar's close, a writer's last commit) before KeyboardInterrupt leaves."""
    import asyncio

    from executor_sft.safe_interrupt import run_async

    seen: list[str] = []

    async def main():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        finally:
            await asyncio.sleep(0)  # cleanup that awaits still runs
            seen.append("cleanup")

    with pytest.raises(KeyboardInterrupt), interrupts_at_safe_points():
        held = signal.getsignal(signal.SIGINT)
        try:
            run_async(main())
        finally:
            assert signal.getsignal(signal.SIGINT) is held  # ours again after the loop
    assert seen == ["cancelled", "cleanup"]


def test_the_library_and_recipes_start_event_loops_through_run_async():
    """A bare `asyncio.run` under a recipe's handler would raise Ctrl-C inside whichever task ran."""
    bare = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("executor_sft", "recipes")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name != "safe_interrupt.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "asyncio.run(" in line
    ]
    assert bare == []

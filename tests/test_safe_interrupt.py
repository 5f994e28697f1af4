"""A Ctrl-C that lands in a `__del__` or an import is raised right after it, not dropped or
raised inside it (the recipes' first seconds; tests/test_early_ctrl_c.py runs them)."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from executor_sft.safe_interrupt import interrupts_at_safe_points, unsafe_to_raise


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


def test_ctrl_c_in_an_import_is_raised_after_it(tmp_path, monkeypatch):
    (tmp_path / "slow_module_for_ctrl_c.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "deadline = time.monotonic() + 0.3\n"
        "while time.monotonic() < deadline:\n"
        "    pass\n"
        "finished = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_module_for_ctrl_c", raising=False)
    with pytest.raises(KeyboardInterrupt), interrupts_at_safe_points():
        import slow_module_for_ctrl_c  # noqa: F401

        time.sleep(2.0)
    assert sys.modules["slow_module_for_ctrl_c"].finished  # the import completed


def test_a_second_ctrl_c_acts_at_once_even_in_an_import(tmp_path, monkeypatch):
    (tmp_path / "insisted_module_for_ctrl_c.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(0.2)\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(2.0)\n"
        "finished = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupts_at_safe_points():
        import insisted_module_for_ctrl_c  # noqa: F401
    assert time.monotonic() - started < 1.5
    assert "insisted_module_for_ctrl_c" not in sys.modules  # stopped inside the import


def test_the_handler_is_restored_and_plain_code_is_interrupted_at_once():
    before = signal.getsignal(signal.SIGINT)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupts_at_safe_points():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2.0)
    assert time.monotonic() - started < 1.0
    assert signal.getsignal(signal.SIGINT) is before
    assert unsafe_to_raise(sys._getframe()) is None

"""The registry every extension point uses: names, import paths, one-line errors."""

from __future__ import annotations

import pytest

from executor_sft.errors import UserError
from executor_sft.registry import Registry, UnknownNameError, is_import_path


def test_register_as_decorator_and_call_and_resolve():
    reg: Registry[object] = Registry("widget")

    @reg.register("a")
    def a():
        return 1

    reg.register("b", len)
    assert reg.get("a") is a and reg.get("b") is len
    assert reg.names() == ("a", "b") and "a" in reg and list(reg) == ["a", "b"]


def test_import_path_resolves_without_registration():
    reg: Registry[object] = Registry("widget")
    assert reg.get("os.path:join") is __import__("os").path.join
    assert reg.get("collections:OrderedDict.fromkeys") == __import__("collections").OrderedDict.fromkeys
    assert is_import_path("a.b:c") and not is_import_path("plain") and not is_import_path(":x")


def test_unknown_name_is_a_user_error_with_a_hint():
    reg: Registry[object] = Registry("retriever kind")
    reg.register("bm25", object())
    with pytest.raises(UnknownNameError, match=r"unknown retriever kind 'bm52': did you mean 'bm25'\?") as e:
        reg.get("bm52")
    assert isinstance(e.value, UserError)
    with pytest.raises(UnknownNameError, match="cannot import module 'no_such_mod_xyz'"):
        reg.get("no_such_mod_xyz:thing")
    with pytest.raises(UnknownNameError, match="has no attribute 'nope'"):
        reg.get("os:nope")


def test_duplicate_name_is_a_bug_unless_replaced():
    reg: Registry[int] = Registry("widget")
    reg.register("x", 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("x", 2)
    reg.register("x", 2, replace=True)
    assert reg.get("x") == 2
    with pytest.raises(ValueError, match="plain name"):
        reg.register("a:b", 3)

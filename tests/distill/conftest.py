"""Fixtures for the distillation tests: GRPO's helpers (scripted turns, recipes as commands), a world index,
an SFT output made by the SFT recipe, and a tiny teacher that shares the tiny student's tokenizer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "grpo"))


@pytest.fixture(scope="session")
def world_index(tmp_path_factory):
    from grpo_helpers import build_world_index

    return build_world_index(tmp_path_factory.mktemp("world") / "index")


@pytest.fixture(scope="session")
def sft_output(tmp_path_factory):
    from grpo_helpers import make_sft_output

    return make_sft_output(tmp_path_factory.mktemp("sft"))


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory):
    """Another random tiny Qwen3 (seed 5) with the same tokenizer, saved as a checkpoint directory."""
    from executor_sft.testing import tiny_qwen3

    model, tok = tiny_qwen3(seed=5)
    path = tmp_path_factory.mktemp("teacher")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path

"""Where the shared test data lives: `../shared` beside the checkout, or $EXECUTOR_SFT_SHARED."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    env = os.environ.get("EXECUTOR_SFT_SHARED")
    return Path(env) if env else REPO_ROOT.parent / "shared"


def minibench_dir() -> Path:
    return shared_dir() / "minibench"


def minibench_corpus() -> Path:
    return minibench_dir() / "corpus.jsonl"


def minibench_questions() -> Path:
    return minibench_dir() / "questions.jsonl"


def seed_splits_dir() -> Path:
    return shared_dir() / "seed_splits"

"""Fixtures for the GRPO tests: BM25 over the shared minibench corpus and a tiny Qwen3 on disk (once each)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def minibench_bm25(minibench_corpus_path):
    from executor_sft.retrieval import BM25Retriever, load_corpus

    return BM25Retriever.build(load_corpus(minibench_corpus_path))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A tiny random Qwen3 and its tokenizer, saved as a checkpoint directory."""
    from executor_sft.testing import tiny_qwen3

    model, tok = tiny_qwen3(seed=1)
    path = tmp_path_factory.mktemp("tiny_qwen3")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def world_index(tmp_path_factory):
    """A BM25 index directory over the sample world's corpus (data/world/corpus.jsonl)."""
    from grpo_helpers import ROOT

    from executor_sft.retrieval import build_index

    path = tmp_path_factory.mktemp("world") / "index"
    build_index(ROOT / "data" / "world" / "corpus.jsonl", path, bm25=True)
    return path


@pytest.fixture(scope="session")
def sft_output(tmp_path_factory):
    """An SFT output directory as a user has it: `recipes/sft_executor.py` run as a command
    (tiny Qwen3, one step on two rows of data/sft.jsonl, to keep the time down)."""
    from grpo_helpers import ROOT, run_recipe

    root = tmp_path_factory.mktemp("sft")
    rows = (ROOT / "data" / "sft.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:2]
    (root / "sft.jsonl").write_text("".join(rows), encoding="utf-8")
    out = root / "out"
    run_recipe(
        "sft_executor",
        "--model_name_or_path", "offline:tiny-qwen3",
        "--dataset_name", str(root / "sft.jsonl"),
        "--max_steps", "1",
        "--max_length", "2048",
        "--output_dir", str(out),
    )  # fmt: skip
    return out

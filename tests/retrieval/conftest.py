"""Retrieval fixtures: a BM25 index of the whole minibench corpus, a small dense subset, servers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from executor_sft.retrieval import build_index
from executor_sft.retrieval.encoders import EncoderConfig


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def dev_questions(minibench_questions_path) -> list[dict]:
    return [q for q in read_jsonl(minibench_questions_path) if q["split"] == "dev"]


@pytest.fixture(scope="session")
def bm25_index(minibench_corpus_path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bm25_index")
    build_index(minibench_corpus_path, out, bm25=True)
    return out


@pytest.fixture(scope="session")
def subset_questions(dev_questions) -> list[dict]:
    rng = random.Random(0)
    return rng.sample(dev_questions, 12)


@pytest.fixture(scope="session")
def subset_corpus(minibench_corpus_path, subset_questions, tmp_path_factory) -> Path:
    """Gold passages of a few dev questions plus sampled distractors, as {id, contents} rows."""
    rows = read_jsonl(minibench_corpus_path)
    gold = {d for q in subset_questions for d in q["positive_doc_ids"]}
    rng = random.Random(1)
    others = rng.sample([r for r in rows if r["id"] not in gold], 120)
    keep = [r for r in rows if r["id"] in gold] + others
    rng.shuffle(keep)
    path = tmp_path_factory.mktemp("subset") / "corpus.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for r in keep:
            f.write(json.dumps({"id": r["id"], "contents": f'"{r["title"]}"\n{r["text"]}'}) + "\n")
    return path


@pytest.fixture(scope="session")
def subset_index(subset_corpus, tmp_path_factory) -> Path:
    """BM25 + dense (MiniLM, flat) over the subset; max_length 128 keeps it fast on 2 cores."""
    out = tmp_path_factory.mktemp("subset_index")
    build_index(
        subset_corpus, out, bm25=True, dense="minilm", encoder=EncoderConfig(max_length=128), shard_size=64
    )
    return out

"""Shared fixtures: offline models and the shared data (minibench, the paper's splits).

Tests that read the shared data carry the `shared_data` marker (added automatically for the
fixtures below) and are skipped, with one line saying why, where that data is absent.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
from pathlib import Path

import pytest


def share_the_cores() -> None:
    """Give each pytest-xdist worker, and every process it starts, its share of the cores.

    torch's OpenMP pool defaults to one thread per core. Two workers, each training or sampling
    with both cores, spin against each other: two one-step GRPO runs side by side took 194 s
    with the default threads and 59 s with one thread each (45.6 s for one run alone, 2 cores).
    Set before torch loads, so the workers and the recipes they launch inherit it; a user's own
    OMP_NUM_THREADS wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))


def take_ctrl_c_as_a_terminal_would() -> None:
    """Launch recipes with Ctrl-C's default action, as a terminal's foreground job has it.

    A non-interactive shell starts a background job (`cmd &`) with SIGINT ignored, and an ignored
    signal stays ignored across fork and exec, so the recipes the Ctrl-C tests interrupt would
    run on to the end (exit 0). A handled signal is reset to its default across exec instead."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


share_the_cores()
take_ctrl_c_as_a_terminal_would()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tests import support  # noqa: E402  (after the thread count: it may load torch)

SHARED_FIXTURES = {"minibench_corpus_path", "minibench_questions_path", "seed_splits_path"}
"""Fixtures that read the shared data; a test that uses one (even indirectly) is a shared_data test."""


def shared_data_missing() -> str | None:
    """The one-line skip reason when the shared data is absent, else None."""
    needed = [support.minibench_corpus(), support.minibench_questions(), support.seed_splits_dir()]
    missing = [p for p in needed if not p.exists()]
    if not missing:
        return None
    return (
        f"shared data absent ({missing[0]}): set EXECUTOR_SFT_SHARED to the folder holding minibench/ "
        "(Wikipedia passages + multi-hop questions) and seed_splits/ (the paper's question splits)"
    )


PORTS_GROUP = "ports"
"""The pytest-xdist group of the tests that bind ports on 127.0.0.1 (HTTP servers, Ray clusters,
documented commands that serve): under `-n N --dist loadgroup` they all run in one worker, one at
a time, so no two of them race for a port that `free_port()` found free."""

BINDS_PORTS = re.compile(
    r"BackgroundServer|free_port|LocalRayCluster|ray_cluster|smollm2_server|served_world|serve_retriever"
    r"|executor_sft\.llm\.server|uvicorn|--port|from (fault|retrieval)_helpers import"
)
"""What in a test module's source starts a server or a Ray node (directly or through a helper)."""


@functools.cache
def binds_ports(module: Path) -> bool:
    return bool(BINDS_PORTS.search(module.read_text(encoding="utf-8")))


LONGEST_FIRST = (
    "tests/test_doc_commands.py::test_readme_command_1_then_distillation_then_grpo",
    "tests/test_doc_commands.py::test_run_block[docs/rollout.md:",
    "tests/sft/test_fast_path.py::test_compile_layers_keeps_the_loss_and_packed_isolation",
    "tests/sft/test_sft_train.py::test_recipe_under_accelerate_deepspeed_zero2_on_cpu",
    "tests/demo/test_probe.py::test_probe_callback_records_each_probe_step_once_across_a_killed_run",
)
"""The tests that alone take minutes (docs/contributing.md has their times), queued first: xdist
hands out tests in collection order, and one of these started last was the run's whole tail."""


def _queue_rank(item) -> int:
    return next(
        (i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)), len(LONGEST_FIRST)
    )


def pytest_collection_modifyitems(config, items):
    items.sort(key=_queue_rank)  # stable: the rest keep their order
    for item in items:
        if SHARED_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.shared_data)
        if binds_ports(item.path):
            item.add_marker(pytest.mark.xdist_group(PORTS_GROUP))
    reason = shared_data_missing()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("shared_data"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def minibench_corpus_path():
    return support.minibench_corpus()


@pytest.fixture(scope="session")
def minibench_questions_path():
    return support.minibench_questions()


@pytest.fixture(scope="session")
def seed_splits_path():
    return support.seed_splits_dir()


@pytest.fixture(scope="session")
def minibench_bm25_dir(minibench_corpus_path):
    """BM25 over the real minibench corpus, in the cache (about 30 s to build the first time on 2 cores)."""
    from executor_sft.eval.runner import ensure_index

    return ensure_index(support.cache_dir() / "indexes" / "minibench-bm25", minibench_corpus_path)


@pytest.fixture(scope="session")
def minibench_bm25(minibench_bm25_dir, minibench_corpus_path):
    """The BM25 retriever over `minibench_bm25_dir` (memory-mapped), one per session."""
    from executor_sft.retrieval.config import load_retriever

    return load_retriever(minibench_bm25_dir, corpus=minibench_corpus_path)


@pytest.fixture()
def tiny_model():
    """A fresh random tiny Qwen3 (model, tokenizer); cheap enough to build per test."""
    return support.tiny_qwen3()


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    return support.qwen3_tokenizer()


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct (model, tokenizer); session-scoped because it takes seconds to load."""
    return support.smollm2_instruct()


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """A real two-node Ray cluster on 127.0.0.1 (head + one worker node, one CPU each), this
    process connected to it; torn down at the end (only these nodes' process groups)."""
    pytest.importorskip("ray")
    from tests.support.ray_cluster import LocalRayCluster

    cluster = LocalRayCluster(tmp_path_factory.mktemp("ray"))
    try:
        cluster.start_head()
        cluster.add_node()
        cluster.connect(nodes=2)
        yield cluster
    finally:
        cluster.stop()


# --- the post-training tests' inputs (distillation and GRPO): saved outputs, as a user has them ---


@pytest.fixture(scope="session")
def world_index(tmp_path_factory):
    """A BM25 index directory over the sample world's corpus (data/world/corpus.jsonl)."""
    from post_training import build_world_index

    return build_world_index(tmp_path_factory.mktemp("world") / "index")


@pytest.fixture(scope="session")
def sft_output(tmp_path_factory):
    """What `recipes/sft_executor.py` writes (tiny Qwen3, one step), made once per session."""
    from post_training import make_sft_output

    return make_sft_output(tmp_path_factory.mktemp("sft"))


@pytest.fixture(scope="session")
def distilled_output(sft_output, tiny_teacher, world_index, tmp_path_factory):
    """`recipes/distill_executor.py` (distill_tiny.yaml, 2 steps) run once on `sft_output`: the
    distillation recipe's own test reads its output, the stage chain trains GRPO from it."""
    from post_training import ROOT, run_recipe

    out = tmp_path_factory.mktemp("distill") / "distilled"
    proc = run_recipe(
        "distill_executor",
        "--config", str(ROOT / "recipes" / "configs" / "distill_tiny.yaml"),
        "--model_name_or_path", str(sft_output),
        "--teacher_model_name_or_path", str(tiny_teacher),
        "--retriever", json.dumps({"index": str(world_index)}),
        "--max_completion_length", "32",
        "--output_dir", str(out),
    )  # fmt: skip
    return out, proc.stdout


def _saved_tiny_qwen3(path, seed: int):
    model, tok = support.tiny_qwen3(seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A tiny random Qwen3 (seed 1) and its tokenizer, saved as a checkpoint directory."""
    return _saved_tiny_qwen3(tmp_path_factory.mktemp("tiny_qwen3"), seed=1)


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory):
    """Another random tiny Qwen3 (seed 5) with the same tokenizer: a distillation teacher."""
    return _saved_tiny_qwen3(tmp_path_factory.mktemp("teacher"), seed=5)

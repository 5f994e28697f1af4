"""The preflight: a run that cannot succeed is refused before any model loads, every problem at once.

The recipes run as subprocesses from the repository root, as the docs run them; endpoints are real
HTTP servers on 127.0.0.1 (or ports nothing listens on), indexes are real BM25 indexes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forkserver import run_script

from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.preflight import Part, problems
from executor_sft.retrieval import build_index
from executor_sft.retrieval.config import RetrieverConfig
from tests.support.doubles import ScriptedChatModel
from tests.support.ray_cluster import free_port

REPO = Path(__file__).resolve().parents[1]
PAPER_SWEEPS = sorted(
    p.relative_to(REPO).as_posix()
    for p in (REPO / "recipes" / "configs" / "paper").glob("*.yaml")
    if p.stem.startswith(("tab", "fig"))
)
MISSING_KEY = "EXECUTOR_SFT_TEST_KEY_THAT_IS_NOT_SET"


def run(recipe: str, *args: str, drop_env: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    for name in drop_env:
        env.pop(name, None)
    start = time.monotonic()
    proc = run_script(
        [sys.executable, f"recipes/{recipe}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, time.monotonic() - start


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), proc.stderr
    assert len(set(lines)) == len(lines)
    return lines


def test_paper_sweep_with_placeholder_hosts_and_no_keys_is_refused_at_once(tmp_path):
    cells = REPO / "runs" / "paper"
    cells_existed = cells.exists()
    proc, wall = run(
        "sweep.py",
        "--config", "recipes/configs/paper/tab2_backbone_sweep.yaml",
        "--output_dir", str(tmp_path / "out"),
        drop_env=("DEEPSEEK_API_KEY",),
    )  # fmt: skip
    lines = error_lines(proc)
    assert wall < 10, f"{wall:.1f} s"
    sweep, base = "recipes/configs/paper/tab2_backbone_sweep.yaml", "recipes/configs/paper/eval_base.yaml"
    for backbone in ("qwen3-1_7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "v4-flash"):
        (line,) = [
            line for line in lines if line.startswith(f"error: {sweep}: backbones.{backbone}.base_urls: ")
        ]
        assert "SET-THIS" in line and line.endswith("is a placeholder; set it")
    assert (
        f"error: {sweep}: executors.qwen3-1_7b.base_urls: http://SET-THIS-QWEN3-1-7B-HOST:8001/v1 is a placeholder; set it"
        in lines
    )
    for where in (f"{sweep}: backbones.v4-flash", f"{base}: models.judge"):
        assert any(
            line.startswith(f"error: {where}.api_key_env: $DEEPSEEK_API_KEY is not set") for line in lines
        )
    assert any(line.startswith(f"error: {base}: models.answerer.base_urls: ") for line in lines)
    if not (REPO / "indexes" / "paper" / "manifest.json").exists():
        assert (
            f"error: {base}: retriever.index: indexes/paper: no index there (manifest.json missing); build it with "
            "recipes/build_index.py --corpus CORPUS --output indexes/paper --dense Qwen/Qwen3-Embedding-8B"
        ) in lines
    shared_questions = any("questions.0.path" in line for line in lines)  # a clone without ../shared
    assert len(lines) == 12 + shared_questions
    assert not (tmp_path / "out").exists()
    assert cells.exists() == cells_existed


@pytest.mark.parametrize("config", PAPER_SWEEPS)
def test_every_paper_sweep_is_refused_before_it_starts(config, tmp_path):
    proc, wall = run(
        "sweep.py", "--config", config, "--output_dir", str(tmp_path / "out"), "--preflight_only"
    )
    lines = error_lines(proc)
    assert wall < 10 and any("is a placeholder; set it" in line for line in lines)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("preflight")
    corpus = root / "corpus.jsonl"
    rows = [{"id": str(i), "contents": f"Title {i}\nPassage number {i}."} for i in range(4)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    build_index(corpus, root / "index", bm25=True)
    return root / "index"


@pytest.fixture(scope="module")
def model_url():
    with BackgroundServer(create_app(ScriptedChatModel(default="ok", name="served"))) as server:
        yield server.base_url


def write_config(path: Path, **fields) -> Path:
    path.write_text(json.dumps(fields), encoding="utf-8")  # JSON is YAML
    return path


def served(url: str, **extra) -> dict:
    return {"backend": "openai", "model": "served", "base_urls": [url], **extra}


def test_preflight_only_checks_a_ready_config_and_writes_nothing(tmp_path, index, model_url):
    questions = write_config(tmp_path / "questions.jsonl", id="q1", question="Who?", answers=["x"])
    models = {role: served(model_url) for role in ("backbone", "answerer", "executor")}
    collect = write_config(
        tmp_path / "collect.yaml",
        questions={"path": str(questions)},
        retriever={"index": str(index)},
        models=models,
        pipeline={"executor_roles": ["executor"], "driver": "executor"},
        output_dir=str(tmp_path / "collected"),
    )
    proc, _ = run("collect_rollouts.py", "--config", str(collect), "--preflight_only")
    assert proc.returncode == 0, proc.stderr
    assert "preflight: 5 config parts checked, 3 endpoints answered; nothing is missing" in proc.stdout
    evaluate = write_config(
        tmp_path / "eval.yaml",
        questions=[{"path": str(questions)}],
        retriever={"index": str(index)},
        models=models,
        output_dir=str(tmp_path / "evaluated"),
    )
    proc, _ = run("evaluate.py", "--config", str(evaluate), "--preflight_only")
    assert proc.returncode == 0, proc.stderr
    assert "nothing is missing" in proc.stdout
    assert not (tmp_path / "collected").exists() and not (tmp_path / "evaluated").exists()


def test_every_kind_of_problem_is_its_own_line(tmp_path, index, model_url):
    dead_model, dead_retriever = free_port(), free_port()
    questions = write_config(tmp_path / "questions.jsonl", id="q1", question="Who?", answers=["x"])
    config = write_config(
        tmp_path / "eval.yaml",
        questions=[{"path": str(questions)}],
        retriever={"url": f"http://127.0.0.1:{dead_retriever}"},
        models={
            "backbone": served(f"http://127.0.0.1:{dead_model}/v1"),
            "answerer": {"backend": "transformers", "model": str(tmp_path / "no-such-checkpoint")},
            "executor": {"backend": "transformers", "model": "offline:nope"},
            "judge": served(model_url, api_key_env=MISSING_KEY),
        },
        output_dir=str(tmp_path / "evaluated"),
    )
    proc, wall = run("evaluate.py", "--config", str(config), drop_env=(MISSING_KEY,))
    lines = error_lines(proc)
    where = f"error: {config}"
    assert lines[0].startswith(
        f"{where}: models.backbone.base_urls: GET http://127.0.0.1:{dead_model}/v1/models got no answer (ConnectError"
    )
    assert lines[1] == (
        f"{where}: models.answerer.model: {tmp_path / 'no-such-checkpoint'}: no such directory; give the directory "
        "a training run wrote, or a hub id"
    )
    assert lines[2].startswith(
        f"{where}: models.executor.model: offline:nope: no such offline model; known: "
    )
    assert lines[3].startswith(f"{where}: models.judge.api_key_env: ${MISSING_KEY} is not set")
    assert lines[4].startswith(
        f"{where}: retriever.url: GET http://127.0.0.1:{dead_retriever}/health got no answer"
    )
    assert len(lines) == 5 and wall < 10
    assert not (tmp_path / "evaluated").exists()


def test_index_built_without_the_part_its_kind_reads(index):
    (line,) = problems([Part("cfg.yaml", "retriever", RetrieverConfig(index=str(index), kind="dense"))])
    assert line.startswith(f"cfg.yaml: retriever.index: {index}: built without its dense part")
    assert line.endswith(
        f"build it with recipes/build_index.py --corpus CORPUS --output {index} --dense MODEL"
    )


def test_a_hub_id_that_is_not_cached_is_named(monkeypatch):
    """Offline, and online with no hub answering (tests/llm/test_hub.py has the recipe runs)."""
    from huggingface_hub import constants

    from executor_sft.llm.sources import source_problem

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE=1 forbids a download" in source_problem("someone/not-cached-here")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    assert "did not answer in 5 s" in source_problem("someone/not-cached-here")
    assert source_problem("./relative/checkpoint").endswith(
        "no such directory; give the directory a training run wrote, or a hub id"
    )

"""Collection's bookkeeping under real faults: two launches of one command, a resume with an edited
config, a disk that fills during collection and frees, a full disk at the summary, bad merges.

Every role is a scripted synthetic-world policy behind `create_app` on 127.0.0.1, reached by
recipes/collect_rollouts.py (a real subprocess) over HTTP; a gate in front of the chat routes
holds the first collection mid-run while a second one is launched.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from fastapi import FastAPI, Request

from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.retrieval.build import build_index
from executor_sft.rollout import CollectConfig, collect
from executor_sft.synthetic import scripted_models
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.faults

N_QUESTIONS = 4
ROLES = ("backbone", "teacher", "student", "answerer")


class Gate:
    """Holds every chat request while closed; `arrived` is set by the first one."""

    def __init__(self):
        self.open = threading.Event()
        self.open.set()
        self.arrived = threading.Event()

    async def __call__(self, request: Request, call_next):
        if request.method == "POST" and request.url.path.endswith("/chat/completions"):
            self.arrived.set()
            while not self.open.is_set():
                await _sleep(0.02)
        return await call_next(request)


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


@pytest.fixture(scope="module")
def served(world, world_dir, tmp_path_factory):
    """(base url, gate, index dir): one mounted OpenAI-compatible app per scripted role."""
    index = tmp_path_factory.mktemp("faults_index") / "index"
    build_index(world_dir / "corpus.jsonl", index)
    gate = Gate()
    app = FastAPI()
    app.middleware("http")(gate)
    for role, model in scripted_models(world).items():
        app.mount(f"/{role}", create_app(model, served_name=role))
    with BackgroundServer(app) as server:
        yield server.base_url.removesuffix("/v1"), gate, index


def _config(world_dir: Path, served, out: Path, **extra) -> dict:
    base, _, index = served
    return {
        "questions": {"path": str(world_dir / "questions.jsonl"), "limit": N_QUESTIONS},
        "retriever": {"index": str(index), "kind": "bm25", "k": 3},
        "models": {
            role: {"backend": "openai", "model": role, "base_urls": f"{base}/{role}/v1", "timeout_s": 60}
            for role in ROLES
        },
        "output_dir": str(out),
        "concurrency": 2,
        **extra,
    }


def _write_config(tmp_path: Path, config: dict, name: str = "collect.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _launch(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "recipes/collect_rollouts.py", *args],
        cwd=REPO_ROOT,
        env={**env, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = _launch(*args)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _error_line(stderr: str) -> str:
    """The one `error:` line a user-facing failure prints (and nothing like a traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def _ids(path: Path) -> list[str]:
    """Episode ids of a rollouts file; every line must parse."""
    return [json.loads(line)["episode_id"] for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_second_launch_fails_naming_the_first_or_waits_for_it(world_dir, served, tmp_path):
    _, gate, _ = served
    out = tmp_path / "out"
    config = _write_config(tmp_path, _config(world_dir, served, out))
    gate.open.clear()
    gate.arrived.clear()
    first = _launch("--config", str(config))
    waiter = None
    try:
        assert gate.arrived.wait(timeout=120), "the first collection never called a model"
        second = _run("--config", str(config), timeout=120)
        assert second.returncode == 2
        assert _error_line(second.stderr) == (
            f"error: {out / 'rollouts.jsonl'}: another process (pid {first.pid}) is writing it; wait for "
            "it to finish, or run with --wait_for_lock (wait_for_lock: true) to wait for it"
        )
        waiter = _launch("--config", str(config), "--wait_for_lock")
        deadline = time.monotonic() + 60
        while "waiting for" not in (line := waiter.stderr.readline()) and time.monotonic() < deadline:
            assert line, "the waiting launch ended instead of waiting"
        assert f"waiting for pid {first.pid} to finish writing it" in line
        assert first.poll() is None and waiter.poll() is None
    finally:
        gate.open.set()
    first_out, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    waiter_out, waiter_err = waiter.communicate(timeout=300)
    assert waiter.returncode == 0, waiter_err
    assert f"wrote 0 episodes to {out / 'rollouts.jsonl'}" in waiter_out  # it resumed a finished file
    ids = _ids(out / "rollouts.jsonl")
    assert len(ids) == len(set(ids)) == N_QUESTIONS
    summary = json.loads((out / "rollouts.summary.json").read_text())
    assert summary["episodes"] == N_QUESTIONS and summary["questions"] == N_QUESTIONS


@pytest.mark.slow
def test_a_resume_with_an_edited_config_is_refused_naming_what_changed(world_dir, served, tmp_path):
    out = tmp_path / "out"
    first = _config(world_dir, served, out)
    first["questions"]["limit"] = 2
    done = _run("--config", str(_write_config(tmp_path, first)))
    assert done.returncode == 0, done.stderr
    rollouts = out / "rollouts.jsonl"
    before = rollouts.read_bytes()
    edited = _config(world_dir, served, out, pipeline={"max_rounds": 2})
    edited["models"]["teacher"]["model"] = "student"
    path = _write_config(tmp_path, edited, "edited.yaml")
    refused = _run("--config", str(path))
    assert refused.returncode == 2
    assert _error_line(refused.stderr) == (
        f"error: {rollouts}: holds episodes of a different system (changed: "
        'models.teacher.model: "teacher" -> "student"; pipeline.max_rounds: 4 -> 2); use a new output_dir '
        "to start a new file, or run with --accept_system_change (accept_system_change: true) to add this "
        "system's episodes to it"
    )
    assert rollouts.read_bytes() == before
    # more questions of the same system is a resume, not a change
    more = _run("--config", str(_write_config(tmp_path, _config(world_dir, served, out), "more.yaml")))
    assert more.returncode == 0, more.stderr
    assert len(set(_ids(rollouts))) == len(_ids(rollouts)) == N_QUESTIONS
    accepted = _run("--config", str(path), "--accept_system_change")
    assert accepted.returncode == 0, accepted.stderr
    record = json.loads((out / "rollouts.system.json").read_text())
    assert record["system"]["pipeline"]["max_rounds"] == 2
    assert record["accepted_changes"][0]["changed"][0] == 'models.teacher.model: "teacher" -> "student"'


class _FreeDiskOnFailedWrite(logging.Handler):
    """Deletes the filler file when the runner reports a failed write: another process frees space."""

    def __init__(self, filler: Path):
        super().__init__()
        self.filler, self.failures = filler, 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("writing ") and " failed" in record.getMessage():
            self.failures += 1
            self.filler.unlink(missing_ok=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (about 40 of these episodes, ~50 KB each); unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def _fill(disk: Path, leave: int) -> Path:
    """Fill `disk` up to `leave` free bytes with one file."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler.write_bytes(b"\0" * max(0, free - leave))
    return filler


def test_the_disk_fills_during_collection_and_frees(world, world_dir, world_bm25, small_disk, tmp_path):
    """Before: the partial bytes of the failed write stayed and the next batch was glued onto them."""
    import asyncio

    config = CollectConfig.model_validate(
        {
            "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 12},
            "retriever": {"index": "unused"},
            "output_dir": str(small_disk / "out"),
            "concurrency": 1,
            "llm_cache": False,
        }
    )
    models = {role: m for role, m in scripted_models(world).items() if role != "judge"}
    (small_disk / "out").mkdir()
    filler = _fill(small_disk, leave=120_000)  # two episodes fit, the third fails part-way
    freeing = _FreeDiskOnFailedWrite(filler)
    logging.getLogger("executor_sft.episode_runner").addHandler(freeing)
    try:
        result = asyncio.run(collect(config, models=models, retriever=world_bm25, show_progress=False))
    finally:
        logging.getLogger("executor_sft.episode_runner").removeHandler(freeing)
    assert freeing.failures >= 1 and result.failed, "the disk never filled"
    ids = _ids(result.path)  # every line parses: no torn episode glued to a whole one
    assert len(ids) == len(set(ids)) == result.written
    assert not {eid for eid, _ in result.failed} & set(ids)
    again = asyncio.run(collect(config, models=models, retriever=world_bm25, show_progress=False))
    assert again.failed == [] and again.written == len(result.failed)
    ids = _ids(result.path)
    assert len(ids) == len(set(ids)) == 12


def test_a_full_disk_at_the_summary_is_one_line_and_keeps_the_old_summary(
    world_dir, served, small_disk, tmp_path
):
    """Before: `rollouts.summary.json` was left at 0 bytes and the recipe ended in a traceback."""
    out = small_disk / "out"
    config = _write_config(tmp_path, _config(world_dir, served, out, llm_cache=False))
    first = _run("--config", str(config))
    assert first.returncode == 0, first.stderr
    summary, rollouts = out / "rollouts.summary.json", out / "rollouts.jsonl"
    before = summary.read_bytes(), rollouts.read_bytes()
    _fill(small_disk, leave=0)
    full = _run("--config", str(config))
    assert full.returncode == 2
    line = _error_line(full.stderr)
    assert line.startswith(f"error: {summary}: the disk is full"), line
    assert (summary.read_bytes(), rollouts.read_bytes()) == before
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_merge_refuses_a_missing_input_and_an_output_that_is_an_input(world_dir, served, tmp_path):
    out = tmp_path / "out"
    done = _run("--config", str(_write_config(tmp_path, _config(world_dir, served, out))))
    assert done.returncode == 0, done.stderr
    rollouts = out / "rollouts.jsonl"
    before = rollouts.read_bytes()
    merged = tmp_path / "merged.jsonl"

    missing = _run(
        "merge", "--inputs", str(rollouts), str(tmp_path / "absent.jsonl"), "--output", str(merged)
    )
    assert missing.returncode == 2
    assert _error_line(missing.stderr) == (
        f"error: {tmp_path / 'absent.jsonl'}: merge input not found (or not a file); check --inputs"
    )
    assert not merged.exists()  # no partial output

    into_input = _run("merge", "--inputs", str(rollouts), "--output", str(rollouts))
    assert into_input.returncode == 2
    assert _error_line(into_input.stderr) == f"error: {rollouts}: is also the --output; merge into a new file"
    assert rollouts.read_bytes() == before

    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(before + b"{not json}\n" + before)
    broken = _run("merge", "--inputs", str(rollouts), str(damaged), "--output", str(merged))
    assert broken.returncode == 2
    assert _error_line(broken.stderr).startswith(f"error: {damaged}:{N_QUESTIONS + 1}: invalid JSON")
    assert not merged.exists()  # the first input's episodes were taken back out

    ok = _run("merge", "--inputs", str(rollouts), str(rollouts), "--output", str(merged))
    assert ok.returncode == 0, ok.stderr
    assert merged.read_bytes() == before
    assert json.loads((tmp_path / "merged.system.json").read_text()) == json.loads(
        (out / "rollouts.system.json").read_text()
    )
    assert Counter(_ids(merged)) == Counter(_ids(rollouts))

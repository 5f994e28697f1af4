"""bench/marl_credit.py killed with SIGKILL after its first checkpoint, then run again: the arm
goes on from that step with its episode log whole, and a rerun with other settings is refused
before any model loads. Real subprocesses, a tiny random Qwen3, the synthetic world, BM25."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from forkserver import run_script

from executor_sft.grpo.marl_train import load_questions
from executor_sft.training.checkpoints import checkpoint_problems
from tests.support.paths import REPO_ROOT
from tests.support.recipes import stderr_tail

pytestmark = pytest.mark.slow  # four launches of a TRL script, one of them to its first checkpoint


def _command(sft, work, **changed: str) -> list[str]:
    flags = {
        "--sft": str(sft),
        "--work": str(work),
        "--results": str(work / "results" / "marl_credit"),
        "--arms": "shared",
        "--steps": "2",
        "--generations": "2",
        "--questions_per_step": "2",
        "--max_tokens": "16",
        "--max_rounds": "1",
        "--max_parallel": "1",
        "--max_turns": "2",
        "--entities": "200",
        "--questions": "40",
        "--heldout_deep": "0",
        "--heldout_wide": "0",
        "--screen_deep": "1",  # a pool of one text and one table question, as the CPU runs train on
        "--screen_wide": "1",
        "--pool_samples": "2",
        **changed,
    }
    return [
        sys.executable,
        str(REPO_ROOT / "bench" / "marl_credit.py"),
        *[x for kv in flags.items() for x in kv],
    ]


@pytest.fixture(scope="module")
def runs(tiny_checkpoint, tmp_path_factory):
    """Killed once checkpoint-1 is complete; run with another --lr; run as before."""
    work = tmp_path_factory.mktemp("marl_credit") / "work"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    checkpoint = work / "out" / "shared" / "checkpoint-1"
    with open(work.parent / "killed.log", "w") as log:
        proc = subprocess.Popen(
            _command(tiny_checkpoint, work), stdout=log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + 120
        while not (checkpoint.is_dir() and not checkpoint_problems(checkpoint, with_record=True)):
            assert proc.poll() is None, (work.parent / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no complete checkpoint-1 in 120 s"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    saved = json.loads((checkpoint / "marl_episode_log.json").read_text())
    report = run_script(_command(tiny_checkpoint, work) + ["--report_only"], env=env, timeout=300)
    report_md = (work / "results" / "marl_credit.md").read_text()
    before = {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()}
    other_lr = run_script(_command(tiny_checkpoint, work, **{"--lr": "1e-4"}), env=env, timeout=300)
    after_refusal = {p.name: p.stat().st_mtime_ns for p in checkpoint.iterdir()}
    resumed = run_script(_command(tiny_checkpoint, work), env=env, timeout=300)
    assert resumed.returncode == 0, stderr_tail(resumed.stderr)
    return {
        "work": work,
        "checkpoint": checkpoint,
        "killed": proc.returncode,
        "saved": saved,
        "report": report,
        "report_md": report_md,
        "unchanged": before == after_refusal,
        "other_lr": other_lr,
        "resumed": resumed,
    }


def test_a_killed_arm_resumes_at_its_checkpoint_with_the_episode_log_of_both_processes(runs):
    assert runs["killed"] == -signal.SIGKILL, "the first run finished before the kill"
    assert runs["saved"]["step"] == 1 and len(runs["saved"]["episode_log"]) == 1
    assert f"resuming from {runs['checkpoint']}" in runs["resumed"].stdout + runs["resumed"].stderr
    arm = json.loads((runs["work"] / "arms" / "shared.json").read_text())
    assert arm["starts"] == [0, 1]  # the second process began at step 1, not 0
    assert [e["step"] for e in arm["episode_log"]] == [0, 1] and len(arm["steps"]) == 2
    assert arm["episode_log"][0] == runs["saved"]["episode_log"][0]
    assert arm["train_s"] > runs["saved"]["train_seconds"] > 0
    assert sorted(p.name for p in (runs["work"] / "out" / "shared").glob("checkpoint-*")) == ["checkpoint-2"]


def test_report_only_writes_the_steps_of_an_arm_still_training_without_loading_a_model(runs):
    proc = runs["report"]
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    assert "Loading weights" not in proc.stdout + proc.stderr
    md = runs["report_md"]
    assert "- shared: still training; its steps so far are those its `checkpoint-1` logged (of 2)" in md
    assert md.split("## Per step")[1].split("## Comparison")[0].count("| shared | ") == 1  # step 1 only


def test_a_rerun_with_other_settings_is_refused_in_one_line_before_any_model_loads(runs):
    proc = runs["other_lr"]
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert (
        lines[0].startswith(f"error: {runs['checkpoint']}: ")
        and "learning_rate (1e-05 -> 0.0001)" in lines[0]
    )
    assert "--redo" in lines[0] and "Loading weights" not in proc.stdout + proc.stderr
    assert runs["unchanged"]


def test_a_finished_arm_made_with_other_settings_is_refused_too(runs, tiny_checkpoint):
    """Its cached result would otherwise stand for a run these settings never made."""
    proc = run_script(_command(tiny_checkpoint, runs["work"], **{"--max_turns": "3"}), timeout=300)
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    out = runs["work"] / "out" / "shared"
    assert proc.stderr.strip() == (
        f"error: {out}: the shared arm was trained with other settings than this command: "
        "max_turns (2 -> 3); rerun with those, or add --redo to train the arms from step 0"
    )


def test_a_finished_arm_is_evaluated_on_the_heldout_questions_it_lacks_not_trained_again(
    runs, tiny_checkpoint
):
    """A run made with --heldout_deep 0 (training only) gets its held-out figures from a rerun; a
    later rerun holding out a table question too plays only that one (the pool run trained on its
    saved pool, so which tables are held out is evaluation only)."""
    path = runs["work"] / "arms" / "shared.json"
    trained = json.loads(path.read_text())
    assert trained["heldout"] is None
    model = runs["work"] / "out" / "shared" / "model.safetensors"
    before = model.stat().st_mtime_ns
    proc = run_script(_command(tiny_checkpoint, runs["work"], **{"--heldout_deep": "2"}), timeout=300)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    assert "arm shared: evaluating its model on 2 held-out questions" in proc.stdout
    deep = json.loads(path.read_text())["heldout"]
    assert [q["format"] for q in deep["per_question"]] == ["text", "text"]
    assert deep["item_f1_table"] is None
    assert "| shared | 2 |" in (runs["work"] / "results" / "marl_credit.md").read_text()

    more = {"--heldout_deep": "2", "--heldout_wide": "1"}
    proc = run_script(_command(tiny_checkpoint, runs["work"], **more), timeout=300)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    assert "arm shared: evaluating its model on 1 held-out questions" in proc.stdout
    arm = json.loads(path.read_text())
    held = arm["heldout"]["per_question"]
    assert held[:2] == deep["per_question"] and held[2]["format"] == "table"
    assert arm["heldout"]["item_f1_table"] == held[2]["item_f1"]
    assert arm["heldout"]["f1_all"] == pytest.approx(sum(q["f1"] for q in held) / 3)
    assert "resuming from" not in proc.stdout + proc.stderr and model.stat().st_mtime_ns == before
    assert {k: v for k, v in arm.items() if k != "heldout"} == {
        k: v for k, v in trained.items() if k != "heldout"
    }
    md = (runs["work"] / "results" / "marl_credit.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| shared | 2 |")).split(" | ")
    assert row[8] == f"{held[2]['item_f1']:.3f}"  # the held-out item F1 (table) column
    assert all(0 <= q["gold_found"] <= 1 for q in held) and set(arm["pool_after_found"]) == set(
        arm["pool_after"]
    )

    # a result written before the bench measured `gold_found`: the rerun measures just that
    del arm["heldout"]["per_question"][0]["gold_found"], arm["pool_after_found"]
    path.write_text(json.dumps(arm))
    proc = run_script(_command(tiny_checkpoint, runs["work"], **more), timeout=300)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    assert "arm shared: evaluating its model on 1 held-out questions" in proc.stdout
    assert "arm shared: sampling its model on the pool" in proc.stdout
    again = json.loads(path.read_text())
    assert (
        again["heldout"]["per_question"][1:] == held[1:]
        and "gold_found" in again["heldout"]["per_question"][0]
    )
    assert set(again["pool_after_found"]) == set(again["pool_after"])


def test_holding_out_a_question_the_pool_trained_on_is_refused_in_one_line(runs, tiny_checkpoint):
    """Every table question of the training split held out takes the pool's own one with it."""
    work = runs["work"]
    questions = load_questions(str(work / "world" / "questions_train.jsonl"))
    tables = [q for q in questions if q.answer_format == "table"]
    pool = json.loads((work / "screen.json").read_text())["pool"]
    proc = run_script(_command(tiny_checkpoint, work, **{"--heldout_wide": str(len(tables))}), timeout=300)
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert proc.stderr.strip() == (
        f"error: {work / 'screen.json'}: the pool holds {pool[1]}, which this command holds out; "
        "hold out fewer table questions (--heldout_wide), or screen a new pool in another --work"
    )
    assert "Loading weights" not in proc.stdout + proc.stderr


def test_marl_episodes_writes_each_arms_greedy_episodes_on_the_pool_and_held_out(runs, tiny_checkpoint):
    """bench/marl_episodes.py: the transcript that shows where a reward came from."""
    command = _command(tiny_checkpoint, runs["work"], **{"--heldout_deep": "1", "--heldout_wide": "1"})
    command[1] = str(REPO_ROOT / "bench" / "marl_episodes.py")
    proc = run_script([*command, "--show", "none", "shared"], timeout=300)
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    md = (runs["work"] / "results" / "marl_credit_episodes.md").read_text()
    pool = json.loads((runs["work"] / "screen.json").read_text())["pool"]
    for arm in ("none", "shared"):
        heads = [line for line in md.splitlines() if line.startswith(f"### {arm}: ")]
        assert [h.split()[2] for h in heads][: len(pool)] == pool and len(heads) == len(pool) + 2
    assert md.count("- sub-query: ") >= 2 * (len(pool) + 2) and md.count("Answer: `") == 2 * (len(pool) + 2)
    assert md.count("- report: `") == md.count("- sub-query: ")
    assert md.count("  - search `") + md.count("  - no search ran") >= md.count("- sub-query: ")

"""The warm launcher gives a test the process a fresh interpreter would: same output, status, env."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from forkserver import PRELOAD, run_script

REPO = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent(
    """
    import os, sys, json
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("PROBE_VALUE"),
                      "path0": sys.path[0], "path1": sys.path[1], "stdin": sys.stdin.read(),
                      "main": __name__, "ours_preloaded": "executor_sft" in sys.modules}))
    print("to stderr", file=sys.stderr)
    raise SystemExit(int(os.environ.get("PROBE_EXIT", "0")))
    """
)


def _both(cmd, **kwargs):
    fresh = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)
    forked = run_script(cmd, timeout=120, **kwargs)
    return fresh, forked


def test_a_script_sees_its_own_argv_cwd_env_path_and_stdin(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    extra = tmp_path / "on_the_path"
    env = {**os.environ, "PROBE_VALUE": "seen", "PROBE_EXIT": "3", "PYTHONPATH": str(extra)}
    fresh, forked = _both([sys.executable, str(script), "a", "b c"], cwd=tmp_path, env=env, input="typed")
    assert (forked.returncode, forked.stdout, forked.stderr.splitlines()[-1]) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr.splitlines()[-1],
    )
    assert forked.returncode == 3 and '"env": "seen"' in forked.stdout and '"stdin": "typed"' in forked.stdout
    assert f'"path1": "{extra}"' in forked.stdout and '"ours_preloaded": false' in forked.stdout


@pytest.mark.slow
def test_a_recipes_bad_input_reads_the_same_forked_as_fresh_and_faster(tmp_path):
    cmd = [sys.executable, "recipes/sft_executor.py", "--dataset_name", str(tmp_path / "absent.jsonl")]
    run_script([sys.executable, "recipes/sft_executor.py", "--help"], cwd=REPO)  # the server is up
    start = time.monotonic()
    fresh = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    fresh_s = time.monotonic() - start
    start = time.monotonic()
    forked = run_script(cmd, cwd=REPO, timeout=120)
    forked_s = time.monotonic() - start
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == 2 and forked.stderr.startswith("error: ")
    assert forked_s < fresh_s / 2, (forked_s, fresh_s)  # TRL's import is what the server saves


def test_a_variable_read_at_import_gets_a_fresh_interpreter(tmp_path, monkeypatch):
    script = tmp_path / "which.py"
    script.write_text(
        f"import sys; print(sorted(m for m in sys.modules if m in {PRELOAD!r}))", encoding="utf-8"
    )
    # what TrainingArguments and torch set in a test's own process: read when used, so still forked
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("KMP_INIT_AT_FORK", "FALSE")
    monkeypatch.setenv("PYTHONBREAKPOINT", "ray.util.rpdb.set_trace")  # what ray.init sets
    same = run_script([sys.executable, str(script)])
    other = run_script([sys.executable, str(script)], env={**os.environ, "HF_HOME": str(tmp_path / "hf")})
    assert "trl" in same.stdout  # forked from the warm server
    assert other.stdout.strip() == "[]"  # a fresh interpreter, which reads its own HF_HOME


def test_a_launch_past_its_timeout_is_killed_and_raises(tmp_path):
    script = tmp_path / "sleeps.py"
    script.write_text("import time; print('started', flush=True); time.sleep(60)", encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_script([sys.executable, str(script)], timeout=3)
    assert time.monotonic() - start < 30 and "started" in raised.value.output
    assert run_script([sys.executable, "-c", "print('next')"]).stdout == "next\n"  # the server serves on

"""Issue 41, point 6: inputs a user can get wrong end in one `error:` line (exit 2, no
traceback, nothing written), and SIGTERM to a collector says what was kept, as Ctrl-C does.

Each case runs `recipes/collect_rollouts.py` as a subprocess on real files.
"""

from __future__ import annotations

import json
import signal

import pytest
from fault_helpers import (
    Endpoints,
    RetrievalServer,
    error_lines,
    lines,
    recipe,
    run_recipe,
    wait_for,
    write_collect_config,
)

from tests.support.recipes import stderr_tail

pytestmark = pytest.mark.faults
NOWHERE = {
    role: {
        "backend": "openai",
        "model": role,
        "base_urls": ["http://127.0.0.1:9/v1"],
        "pass_enable_thinking": False,
    }
    for role in ("backbone", "teacher", "student", "answerer", "judge")
}
SFT_ROW = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "tools": []}


def _refused(proc, *expected: str) -> str:
    """The one line naming the bad input; the others (every problem has its line) are the
    preflight's about the endpoints nothing listens on."""
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    assert "Traceback" not in proc.stderr
    found = error_lines(proc.stderr)
    matching = [s for s in found if all(text in s for text in expected)]
    assert len(matching) == 1, found
    line = matching[0]
    assert all("got no answer" in s for s in found if s != line), found
    return line


def _collect(config):
    return run_recipe("collect_rollouts.py", "--config", str(config), timeout=120)


def _config(tmp_path, world_dir, **extra):
    return write_collect_config(
        tmp_path / "cfg.yaml", world_dir, NOWHERE, {"url": "http://127.0.0.1:9"}, **extra
    )


def test_an_attempts_log_path_that_is_a_directory(world_dir, tmp_path):
    (tmp_path / "attempts").mkdir()
    config = _config(tmp_path, world_dir, attempts_path=str(tmp_path / "attempts"))
    _refused(_collect(config), f"{tmp_path / 'attempts'}: is a directory", "attempts_path")


def test_a_parquet_questions_file_that_is_not_parquet(world_dir, tmp_path):
    fake = tmp_path / "questions.parquet"
    fake.write_bytes((world_dir / "questions.jsonl").read_bytes())
    config = _config(tmp_path, world_dir)
    data = json.loads(config.read_text())
    data["questions"]["path"] = str(fake)
    config.write_text(json.dumps(data))
    _refused(_collect(config), f"{fake}:1:", "not a parquet file")


def test_a_json_questions_file_that_is_not_utf8(world_dir, tmp_path):
    rows = [json.loads(line) for line in (world_dir / "questions.jsonl").read_text().splitlines()[:3]]
    rows[0]["question"] = "Où est né le réalisateur ?"
    latin = tmp_path / "questions.json"
    latin.write_bytes(json.dumps(rows, ensure_ascii=False).encode("latin-1"))
    config = _config(tmp_path, world_dir)
    data = json.loads(config.read_text())
    data["questions"]["path"] = str(latin)
    config.write_text(json.dumps(data))
    _refused(_collect(config), f"{latin}:1:", "not UTF-8")


def test_a_role_without_a_model(world_dir, tmp_path):
    models = {role: model for role, model in NOWHERE.items() if role != "student"}
    config = write_collect_config(tmp_path / "cfg.yaml", world_dir, models, {"url": "http://127.0.0.1:9"})
    _refused(_collect(config), f"{config}: invalid config", "models: no model for role(s) ['student']")
    assert not (tmp_path / "out").exists()


def test_max_turns_true_is_not_a_number(world_dir, tmp_path):
    config = _config(tmp_path, world_dir, pipeline={"max_turns": True})
    _refused(
        _collect(config),
        f"{config}: invalid config: field 'pipeline.max_turns'",
        "true/false is not a number",
    )


def test_sft_rows_given_as_rollouts_to_collection_and_to_merge(world_dir, tmp_path):
    config = _config(tmp_path, world_dir)
    rollouts = tmp_path / "out" / "rollouts.jsonl"
    rollouts.parent.mkdir()
    rollouts.write_text(json.dumps(SFT_ROW) + "\n")
    before = rollouts.read_bytes()
    _refused(_collect(config), f"{rollouts}:1: an SFT row")
    assert rollouts.read_bytes() == before

    output = tmp_path / "merged.jsonl"
    merge = run_recipe("collect_rollouts.py", "merge", "--inputs", str(rollouts), "--output", str(output))
    _refused(merge, f"{rollouts}:1: an SFT row", "pass the rollouts file")
    assert not output.exists() and rollouts.read_bytes() == before


def test_sigterm_says_what_was_kept_as_ctrl_c_does(world, world_bm25, world_dir, tmp_path):
    retrieval = RetrievalServer(world_bm25).start()
    try:
        with Endpoints(world) as endpoints:
            endpoints.control.delay_s = 0.3
            retriever = {"url": retrieval.url, "k": 3, "timeout_s": 5.0, "max_retries": 1}
            config = write_collect_config(
                tmp_path / "cfg.yaml", world_dir, endpoints.models(), retriever, limit=12
            )
            rollouts = tmp_path / "out" / "rollouts.jsonl"
            proc = recipe("collect_rollouts.py", "--config", str(config))
            try:
                wait_for(lambda: rollouts.exists() and b"\n" in rollouts.read_bytes(), 90, "an episode")
                proc.send_signal(signal.SIGTERM)
                _, err = proc.communicate(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
            assert proc.returncode == -signal.SIGTERM
            kept = len(lines(rollouts))
            assert f"terminated (SIGTERM): {kept} finished episodes are kept in {rollouts}" in err
            assert "run the same command again to resume" in err and "Traceback" not in err
    finally:
        retrieval.stop()

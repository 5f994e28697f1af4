"""A bad or missing questions file stops `collect_rollouts.py` with its line, exit 2, before any model loads.

The config's models name a transformers checkpoint that does not exist and its retriever a port
nothing listens on: those are the preflight's lines, printed with the questions file's (every
problem at once), and a run that got as far as loading a model would fail with a traceback
instead. `evaluate.py` reads the same files through the same path.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from forkserver import run_script

from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
GOOD = b'{"id": "q1", "question": "Who founded Velmora?", "golden_answers": ["Ada Krell"]}\n'


def _parquet(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


CASES = {
    "bad-json": ("q.jsonl", GOOD + b'{"id": "q2", "question": \n', ":2: field '<json>': invalid JSON"),
    "bom": ("q.jsonl", b"\xef\xbb\xbf" + GOOD, ":1: field '<json>': invalid JSON (Unexpected UTF-8 BOM"),
    "empty-question": ("q.jsonl", GOOD + GOOD.replace(b"Who founded Velmora?", b" "), ":2: field 'question'"),
    "empty-gold": ("q.jsonl", GOOD.replace(b'["Ada Krell"]', b"[]"), ":1: field 'golden_answers'"),
    "nul": ("q.jsonl", GOOD.replace(b"Velmora", b"Vel\x00mora"), ":1: field '<json>': invalid JSON"),
    "non-utf8": ("q.jsonl", GOOD.replace(b"Ada", b"Ad\xe9"), ":1: field '<json>': not UTF-8"),
    "parquet-wrong-columns": (
        "q.parquet",
        _parquet(pa.table({"query": ["Who founded Velmora?"], "target": ["Ada Krell"]})),
        ":1: field 'question': missing or not a non-empty string",
    ),
    "missing": ("q.jsonl", None, ": questions file not found"),
}


def _write_config(tmp: Path, questions: Path, recipe: str) -> Path:
    models = {
        role: {"backend": "transformers", "model": str(tmp / "no-such-model")}
        for role in ("backbone", "teacher", "answerer")
    }
    retriever = {"url": "http://127.0.0.1:9", "max_retries": 0}
    pipeline = {"executor_roles": ["teacher"], "driver": "teacher"}
    if recipe == "collect_rollouts.py":
        config = {"questions": {"path": str(questions)}, "output_dir": str(tmp / "out")}
    else:
        config = {"questions": [{"path": str(questions)}], "output_dir": str(tmp / "out")}
    config |= {"models": models, "retriever": retriever, "pipeline": pipeline}
    path = tmp / "cfg.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _run(recipe: str, config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return run_script(
        [sys.executable, str(REPO / "recipes" / recipe), "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("recipe", "case"),
    [("collect_rollouts.py", case) for case in CASES] + [("evaluate.py", "missing"), ("evaluate.py", "bom")],
)
def test_bad_questions_file_is_one_line_before_any_model_loads(
    recipe: str, case: str, tmp_path: Path
) -> None:
    name, data, expected = CASES[case]
    questions = tmp_path / name
    if data is not None:
        questions.write_bytes(data)
    config = _write_config(tmp_path, questions, recipe)
    config_bytes = config.read_bytes()
    proc = _run(recipe, config)
    assert proc.returncode == 2, stderr_tail(proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and all(s.startswith("error: ") for s in lines), proc.stderr
    mine = [s for s in lines if f"{questions}{expected}" in s]
    assert len(mine) == 1, lines
    others = [s for s in lines if s not in mine]
    assert len(others) == 4 and all(s.startswith(f"error: {config}: ") for s in others), others
    assert sum("no-such-model: no such directory" in s for s in others) == 3  # each role: its line
    assert config.read_bytes() == config_bytes
    assert (questions.read_bytes() if data is not None else None) == data
    assert not (tmp_path / "out" / "rollouts.jsonl").exists()

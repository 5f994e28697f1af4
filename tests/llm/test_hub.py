"""A hub id that cannot be had here is one line before anything loads (issue 54, point 2).

The user's command, `evaluate.py ... --set models.executor.model=Qwen/Qwen3-1.7B --preflight_only`,
runs as a subprocess: once with the hub "reachable" by the environment but answering nothing
(`HF_ENDPOINT` at a closed 127.0.0.1 port), once with `HF_HUB_OFFLINE=1`. Both name the id,
`HF_HUB_OFFLINE` and the cache, and take seconds, not the loader's minute of retries.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.ray_cluster import free_port

REPO = Path(__file__).resolve().parents[2]
COMMAND = [
    "recipes/evaluate.py",
    "--config", "recipes/configs/eval_minibench_smollm2.yaml",
    "--set", "models.executor.model=Qwen/Qwen3-1.7B",
]  # fmt: skip


def evaluate(*args: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    environ = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    environ.update(PYTHONPATH=str(REPO), HF_HOME=env.pop("HF_HOME"), **env)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *COMMAND, *args], cwd=REPO, env=environ, capture_output=True, text=True, timeout=120
    )
    return proc, time.monotonic() - start


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize("run", [["--preflight_only"], []], ids=["preflight_only", "real_run"])
@pytest.mark.shared_data  # the user's exact command: its config reads minibench's questions
def test_a_hub_id_with_no_hub_answering_is_one_line_in_seconds(tmp_path, run):
    proc, wall = evaluate(
        *run, "--output_dir", str(tmp_path / "out"),
        HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=f"http://127.0.0.1:{free_port()}",
    )  # fmt: skip
    line = one_line(proc)
    assert line.startswith(
        "error: recipes/configs/eval_minibench_smollm2.yaml: models.executor.model: Qwen/Qwen3-1.7B: "
        f"not a local directory and not in the hub cache ({tmp_path / 'hf' / 'hub'}, set by HF_HOME), "
        "and the hub at http://127.0.0.1:"
    ), line
    assert "did not answer in 5 s (ConnectError)" in line and "HF_HUB_OFFLINE=1" in line
    assert wall < 30 and not (tmp_path / "out").exists()


@pytest.mark.shared_data  # the user's exact command: its config reads minibench's questions
def test_a_hub_id_under_hf_hub_offline_is_one_line_without_asking(tmp_path):
    proc, wall = evaluate("--preflight_only", HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    line = one_line(proc)
    assert line == (
        "error: recipes/configs/eval_minibench_smollm2.yaml: models.executor.model: Qwen/Qwen3-1.7B: "
        f"not a local directory and not in the hub cache ({tmp_path / 'hf' / 'hub'}, set by HF_HOME), "
        "and HF_HUB_OFFLINE=1 forbids a download; download it first (hf download Qwen/Qwen3-1.7B) "
        "or give a local directory"
    )
    assert wall < 30


def test_a_cached_hub_id_passes_without_asking_the_hub(tmp_path, monkeypatch):
    """What the cache holds is enough: the hub is not asked (its endpoint is closed here)."""
    from huggingface_hub import constants

    from executor_sft.llm.hub import hub_model_problem

    snapshot = tmp_path / "models--someone--tiny" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "models--someone--tiny" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    hub_online(monkeypatch)
    assert hub_model_problem("someone/tiny") is None
    assert "did not answer in 5 s (ConnectError)" in hub_model_problem("someone/not-cached")


def hub_online(monkeypatch) -> None:
    """This process as one started without HF_HUB_OFFLINE (the suite's own start sets it)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


class _NoSuchModel(http.server.BaseHTTPRequestHandler):
    """What the hub answers for a repository it does not have."""

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def test_a_hub_that_answers_it_has_no_such_model_says_so(tmp_path, monkeypatch):
    """A real HTTP server on 127.0.0.1 stands in for the hub: it answers, without the model."""
    from huggingface_hub import constants

    from executor_sft.llm.hub import hub_model_problem

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoSuchModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        hub_online(monkeypatch)
        problem = hub_model_problem("someone/misspelt")
    finally:
        server.shutdown()
        server.server_close()
    assert problem.startswith(f"someone/misspelt: not a local directory and not in the hub cache ({tmp_path}")
    assert f"the hub at {endpoint} has no such model (or it is private)" in problem

"""URLs in a config: a malformed one is a config error, and a password in one never reaches an
error line (issue 55, p02). The user's commands run as subprocesses; the endpoints are ports
nothing listens on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from forkserver import run_script

from executor_sft.urls import check_url, redact
from tests.support.ray_cluster import free_port

REPO = Path(__file__).resolve().parents[1]
EVALUATE = ["recipes/evaluate.py", "--config", "recipes/configs/eval_minibench_smollm2.yaml"]
WHERE = "error: recipes/configs/eval_minibench_smollm2.yaml"


def evaluate(*sets: str) -> list[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    args = [a for s in sets for a in ("--set", s)]
    proc = run_script(
        [sys.executable, *EVALUATE, *args, "--preflight_only"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return proc.stderr.strip().splitlines()


def test_a_malformed_base_url_is_a_config_error():
    assert evaluate('models.judge={backend: openai, model: j, base_urls: "http://[::1"}') == [
        f"{WHERE}: invalid config: field 'models.judge.base_urls': Value error, http://[::1 is not a URL "
        "(Invalid port: ':1'); write it as http://HOST:PORT/..."
    ]


def test_a_password_in_a_url_is_never_echoed():
    port = free_port()
    lines = evaluate(
        f'models.judge={{backend: openai, model: j, base_urls: "http://bob:s3cret@127.0.0.1:{port}/v1"}}',
        'models.answerer={backend: openai, model: a, base_urls: "http://bob:s3cret@[::1"}',
    )
    assert all("s3cret" not in line for line in lines), lines
    assert lines == [
        f"{WHERE}: invalid config: field 'models.answerer.base_urls': Value error, http://bob:***@[::1 is not "
        "a URL (Invalid port: ':1'); write it as http://HOST:PORT/..."
    ]
    lines = evaluate(
        f'models.judge={{backend: openai, model: j, base_urls: "http://bob:s3cret@127.0.0.1:{port}/v1"}}'
    )  # without the shared data the questions file has its own line too
    assert all("s3cret" not in line for line in lines), lines
    (line,) = [line for line in lines if "models.judge.base_urls" in line]
    assert line.startswith(
        f"{WHERE}: models.judge.base_urls: GET http://bob:***@127.0.0.1:{port}/v1/models got no"
    )


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://u:p@h:1/v1", "http://u:***@h:1/v1"),
        ("https://:tok@h/x and http://v:q@k", "https://:***@h/x and http://v:***@k"),
        ("http://h:1/v1", "http://h:1/v1"),
        ("http://user@h/v1", "http://user@h/v1"),
    ],
)
def test_redact(url, shown):
    assert redact(url) == shown


@pytest.mark.parametrize("url", ["127.0.0.1:8000/v1", "ftp://h/x", "http://", "http://[::1"])
def test_check_url_refuses_what_is_no_http_url(url):
    with pytest.raises(ValueError, match="is not a URL"):
        check_url(url)

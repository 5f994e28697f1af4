"""Real endpoints for the fault-injection tests: scripted synthetic-world models behind an
OpenAI-compatible server on 127.0.0.1, a real retrieval server, and the recipes as subprocesses.

`Endpoints` serves every role at `http://127.0.0.1:PORT/<role>/v1`; its `Control` fails a role's
chat calls with 500 (`down`), or slows every call (`delay_s`), while the test says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from forkserver import run_script

from executor_sft.llm.server import BackgroundServer, create_app
from executor_sft.retrieval import server as retrieval_server
from executor_sft.synthetic import scripted_models

REPO = Path(__file__).resolve().parents[2]
ROLES = ("backbone", "teacher", "student", "answerer", "judge")


@dataclass
class Control:
    down: set[str] = field(default_factory=set)
    """Roles whose chat calls answer 500."""
    delay_s: float = 0.0
    then_delay: tuple[str, float] | None = None
    """(role, seconds): once `role` has answered a call, every later call waits `seconds` instead of
    `delay_s`; after an episode's first answer the rest of the run is slow whatever the load."""
    refuse: dict[str, tuple[int, dict]] = field(default_factory=dict)
    """Text -> (status, error body): a chat request whose body holds the text is refused so."""
    served: Counter = field(default_factory=Counter)

    async def __call__(self, request: Request, call_next):
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return await call_next(request)
        role = request.url.path.strip("/").split("/")[0]
        if self.refuse:
            body = (await request.body()).decode("utf-8", "replace")
            for text, (status, error) in self.refuse.items():
                if json.dumps(text)[1:-1] in body:
                    self.served[f"{role}:{status}"] += 1
                    return JSONResponse(status_code=status, content={"error": error})
        if role in self.down:
            self.served[f"{role}:500"] += 1
            return JSONResponse(status_code=500, content={"error": {"message": "upstream down", "code": 500}})
        delay = self.delay_s
        if self.then_delay is not None and self.served[self.then_delay[0]]:
            delay = self.then_delay[1]
        self.served[role] += 1
        if delay:
            await asyncio.sleep(delay)
        return await call_next(request)


class Endpoints:
    """Every role of the synthetic world on one OpenAI-compatible server."""

    def __init__(self, world, replace: dict | None = None):
        """`replace`: role -> a `ChatModel` served in place of that role's scripted model."""
        self.control = Control()
        root = FastAPI()
        root.middleware("http")(self.control)
        for role, model in {**scripted_models(world), **(replace or {})}.items():
            root.mount(f"/{role}", create_app(model, served_name=role))
        self.server = BackgroundServer(root)

    def __enter__(self) -> Endpoints:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def models(self) -> dict:
        base = self.server.base_url.removesuffix("/v1")
        return {
            role: {
                "backend": "openai",
                "model": role,
                "base_urls": [f"{base}/{role}/v1"],
                "timeout_s": 5.0,
                "max_retries": 1,
                "backoff_base_s": 0.01,
                "backoff_max_s": 0.02,
                "pass_enable_thinking": False,
            }
            for role in ROLES
        }


class RetrievalServer:
    """`executor_sft.retrieval.server` over the world's BM25 index; `stop()` and `start()` again on
    the same port make a real outage (connections refused)."""

    def __init__(self, retriever, port: int = 0):
        self.retriever = retriever
        self.app = retrieval_server.create_app(retriever, retrieval_server.ServerConfig(batching=False))
        self.app.middleware("http")(self._slow_documents)
        self.documents_delays: list[float] = []
        """Seconds to hold each next `POST /documents` before answering (one entry per request)."""
        self.documents_requests = 0
        self.server = BackgroundServer(self.app, port=port)

    async def _slow_documents(self, request: Request, call_next):
        if request.method == "POST" and request.url.path == "/documents":
            self.documents_requests += 1
            if self.documents_delays:
                await asyncio.sleep(self.documents_delays.pop(0))
        return await call_next(request)

    def start(self) -> RetrievalServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def restart(self) -> RetrievalServer:
        """A fresh server on the same port (the old one is stopped)."""
        again = RetrievalServer(self.retriever, port=self.server.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                return again.start()
            except RuntimeError:  # the port is not free yet
                if time.monotonic() > deadline:
                    raise
                again = RetrievalServer(self.retriever, port=self.server.port)
                time.sleep(0.2)

    @property
    def url(self) -> str:
        return self.server.base_url.removesuffix("/v1")

    @property
    def requests(self) -> int:
        return self.app.state.requests


def write_collect_config(path: Path, world_dir: Path, models: dict, retriever: dict, **extra) -> Path:
    config = {
        "questions": {"path": str(world_dir / "questions.jsonl"), "limit": extra.pop("limit", 6)},
        "retriever": retriever,
        "models": models,
        "output_dir": str(path.parent / "out"),
        "concurrency": 2,
        **extra,
    }
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return path


RECIPE_ENV = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def recipe(name: str, *args: str, **popen) -> subprocess.Popen:
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen(
        [sys.executable, str(REPO / "recipes" / name), *args],
        cwd=REPO,
        env={**os.environ, **RECIPE_ENV},
        text=True,
        **popen,
    )


def run_recipe(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "recipes" / name), *args]
    return run_script(cmd, cwd=REPO, env={**os.environ, **RECIPE_ENV}, timeout=timeout)


def wait_for(condition, timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def lines(path: Path) -> list[dict]:
    """Every line of a JSONL file, each of which must parse (no torn or unreadable line)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"{path}: last line unfinished"
    return [json.loads(line) for line in data.splitlines()]


def assert_complete(path: Path, expected: int) -> list[dict]:
    """`expected` episodes, each once, none an error, every line readable."""
    episodes = lines(path)
    ids = [e["episode_id"] for e in episodes]
    assert len(ids) == len(set(ids)) == expected, (len(ids), len(set(ids)), expected)
    assert [e["error"] for e in episodes if e["stop_reason"] == "error"] == []
    for episode in episodes:
        for run in episode["runs"]:
            assert run["finish"] != "error", run.get("error")
    return episodes


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def children(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def interrupt(proc: subprocess.Popen, sig: int = signal.SIGINT, group: bool = False) -> None:
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)


def served_models(base: str, roles: dict[str, str]) -> dict:
    """Model configs reaching `scripted_endpoints`: config role -> served scripted role."""
    return {
        role: {"backend": "openai", "model": served, "base_urls": f"{base}/{served}/v1", "timeout_s": 60}
        for role, served in roles.items()
    }

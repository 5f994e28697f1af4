"""A real Ray cluster of local nodes for tests: `ray start` processes on 127.0.0.1 in a temp dir.

Each node is a `ray start --block` in its own session, so its raylet and every worker it spawns
share one process group: killing the group is losing that machine, and tearing the cluster
down touches no other Ray processes on this host.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from executor_sft.retrieval import BM25Retriever, CachedRetriever, load_corpus
from executor_sft.synthetic import load_world, scripted_models
from tests.support.paths import REPO_ROOT

START_TIMEOUT_S = 180.0
NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)
NODE_RESTARTS = 3
"""Times `connect` starts again a worker node that exited while starting: Ray gives a raylet 30 s
to register, which a loaded machine can exceed ("The current node timed out during startup")."""
RAY = str(Path(sys.executable).with_name("ray")) if Path(sys.executable).with_name("ray").exists() else "ray"
"""The `ray` command of this interpreter's environment (its PATH may not hold it)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalRayCluster:
    """A head node and worker nodes, one CPU each; their logs under `root`.

    Ray's own temp dir is a short one under the system temp dir, not `root`: its sockets must fit
    AF_UNIX's 107 bytes, and pytest's per-worker paths under xdist do not leave room for Ray's
    session and socket names.
    """

    def __init__(self, root: Path, env: dict[str, str] | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.ray_temp = Path(tempfile.mkdtemp(prefix="ray-"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Node death is noticed in about a second instead of Ray's default half a minute. Workers
        # unpickle this module's factories: Ray adds only the driver's working directory to their
        # path, so the repository goes on PYTHONPATH for a pytest started from any folder.
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_timeout_ms": "1000",
            "RAY_health_check_failure_threshold": "2",
            **(env or {}),
        }
        self.nodes: list[subprocess.Popen] = []

    def _start(self, args: list[str], name: str) -> subprocess.Popen:
        log = (self.root / f"{name}.log").open("w")
        common = [
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            "1",
            "--temp-dir",
            str(self.ray_temp),
        ]
        # Each node its own ports: Ray's defaults for these are fixed, so two nodes on one host would
        # bind the same one.
        for flag in NODE_PORT_FLAGS:
            common += [flag, str(free_port())]
        proc = subprocess.Popen(
            [RAY, "start", *args, *common],
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        self.nodes.append(proc)
        return proc

    def start_head(self) -> None:
        self._start(["--head", "--port", str(self.port), "--include-dashboard", "false"], "head")
        deadline = time.monotonic() + START_TIMEOUT_S
        # Until the head's raylet has registered, not only its GCS: a node started while the head's
        # raylet is still binding its sockets can take the same ones, and one raylet aborts
        # ("bind: Address already in use").
        while (
            status := subprocess.run(
                [RAY, "status", "--address", self.address], capture_output=True, text=True, env=self.env
            )
        ).returncode or "node_" not in status.stdout:
            if time.monotonic() > deadline or self.nodes[0].poll() is not None:
                raise RuntimeError(f"ray head did not start: {self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of every node's log, for a start-up failure's message."""
        tails = []
        for log in sorted(self.root.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"{log.name}: " + " | ".join(text))
        return "; ".join(tails) or f"no logs in {self.root}"

    def add_node(self) -> subprocess.Popen:
        return self._start(["--address", self.address], f"node{len(self.nodes)}")

    def connect(self, nodes: int) -> Any:
        """`ray`, connected from this process, once `nodes` nodes are alive."""
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, _node_ip_address="127.0.0.1", log_to_driver=False)
        deadline = time.monotonic() + START_TIMEOUT_S
        restarts = 0
        while sum(1 for n in ray.nodes() if n["Alive"]) < nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {nodes} ray nodes came up: {self.log_tail()}")
            for proc in [p for p in self.nodes[1:] if p.poll() is not None]:
                if restarts == NODE_RESTARTS:
                    raise RuntimeError(f"a ray node exited {restarts + 1} times starting: {self.log_tail()}")
                self.nodes.remove(proc)
                self.add_node()
                restarts += 1
            time.sleep(0.5)
        return ray

    def kill(self, proc: subprocess.Popen) -> None:
        """The whole node at once (raylet and its workers): a machine lost (and no longer one of
        `nodes`, so `connect` does not start it again)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
        self.nodes.remove(proc)

    def stop(self) -> None:
        import ray

        ray.shutdown()
        for proc in reversed(self.nodes):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in reversed(self.nodes):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.nodes.clear()
        shutil.rmtree(self.ray_temp, ignore_errors=True)


class Slowed:
    """A `ChatModel` that waits `delay_s` before each of `inner`'s replies (runs that take a while)."""

    def __init__(self, inner: Any, delay_s: float):
        self.inner, self.delay_s = inner, delay_s
        self.name = getattr(inner, "name", type(inner).__name__)

    async def chat(self, messages, tools=None, sampling=None):
        await asyncio.sleep(self.delay_s)
        return await self.inner.chat(messages, tools=tools, sampling=sampling)


def world_models(world_dir: str, questions: Any = None, *, delay_s: float = 0.0, **kwargs: Any) -> dict:
    """The synthetic world's scripted models (a picklable `models_factory` with functools.partial)."""
    models = scripted_models(load_world(Path(world_dir)), **kwargs)
    return {role: Slowed(m, delay_s) for role, m in models.items()} if delay_s else models


def world_retriever(world_dir: str) -> CachedRetriever:
    return CachedRetriever(BM25Retriever.build(load_corpus(Path(world_dir) / "corpus.jsonl")))


class BackgroundCollection:
    """`collect(config)` with the world's scripted models (slowed) on a thread, for tests that
    break the cluster while it runs."""

    def __init__(self, config: Any, world_dir: str, delay_s: float = 0.05, **script: Any):
        import functools
        import threading

        from executor_sft.rollout import collect

        models = functools.partial(world_models, world_dir, delay_s=delay_s, **script)
        retriever = functools.partial(world_retriever, world_dir)
        self.config = config
        self.result: Any = None

        def run() -> None:
            self.result = asyncio.run(
                collect(config, models=models, retriever=retriever, show_progress=False)
            )

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def written(self) -> int:
        path = self.config.rollouts_path
        return len(path.read_bytes().splitlines()) if path.exists() else 0

    def wait_until(self, condition: Any, timeout_s: float = 120.0) -> None:
        """Until `condition()` holds; fails if the run ends first or time runs out."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise AssertionError(f"the collection ended or stalled first ({self.written()} written)")
            time.sleep(0.05)

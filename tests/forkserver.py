"""Recipe launches forked from a warm interpreter, so a test pays TRL's import once per worker.

A recipe that imports TRL spends about 5 of its 6.5 s of start-up importing transformers, TRL
and PEFT (`from transformers import TrainingArguments` alone pulls the auto-model registry,
generation utilities and scikit-learn) before it reads its first argument. The suite launches
such recipes about a hundred times.

`run_script` hands `python <script> ...` to a server (one per pytest-xdist worker) that has
imported those libraries once. The server forks; the child is its own process with the
command's argv, environment, working directory, stdin, stdout, stderr and exit status, and runs
the script from its first line as `__main__`. Nothing of ours is pre-imported (`executor_sft` is
imported by the child, as in a fresh process). What the libraries printed while the server
imported them is printed again at the start of each child's output, so a test that checks a
recipe's output for import-time warnings still sees them.

A launch runs as a plain subprocess instead when the server could not give the same process:
another interpreter, `-m`/`-c`, a variable those libraries read at import (HF_*, TRANSFORMERS_*,
XDG_*, OMP_*, PYTHON*, ...) set differently from the server's, or `EXECUTOR_SFT_FRESH_INTERPRETERS=1`
(which turns the server off for a whole run). The README and documented-command tests keep fresh
interpreters throughout: they are where a user's first start-up is checked.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PRELOAD = (
    "torch",
    "transformers",
    "transformers.training_args",
    "transformers.models.auto",
    "peft",
    "accelerate",
    "datasets",
    "trl",
)
"""What every TRL recipe imports before it reads an argument (the slow part of its start)."""

READ_AT_IMPORT = (
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "TORCH_HOME",
    "XDG_",
    "PYTHON",
    "OMP_",
    "MKL_",
    "LD_",
    "CUDA_",
)
"""Prefixes of variables a pre-imported library (or the interpreter) reads once, at start-up: cache
and hub locations, offline switches, thread counts, interpreter options. A launch whose value of
any of them differs from the server's would not see its own, so it gets a fresh interpreter.
Variables the libraries set for themselves in a running process (ACCELERATE_MIXED_PRECISION from
TrainingArguments, KMP_* and TORCHINDUCTOR_CACHE_DIR from torch) are read when used, and pass."""

FRESH = "EXECUTOR_SFT_FRESH_INTERPRETERS"


READ_WHEN_USED = {"PYTHONPATH", "PYTHONBREAKPOINT"}
"""Applied to the child itself (its `sys.path`), or read at each use: `ray.init` sets
PYTHONBREAKPOINT in the test's process, which `breakpoint()` reads when called."""


def _read_at_import(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(READ_AT_IMPORT) and k not in READ_WHEN_USED}


class _Server:
    """The client side: one server process, started on first use, one launch at a time."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.proc: subprocess.Popen | None = None
        self.pending = b""
        self.lock = threading.Lock()

    def refuses(self, cmd: list, env: dict[str, str]) -> str | None:
        """Why this launch needs a fresh interpreter, or None."""
        if os.environ.get(FRESH) == "1":
            return FRESH
        if (
            sys.platform != "linux"
        ):  # no fork on Windows; on macOS a fork after system frameworks load can abort
            return f"not on {sys.platform}"
        if len(cmd) < 2 or cmd[0] != sys.executable or not str(cmd[1]).endswith(".py"):
            return "not `python <script>.py`"
        ours, theirs = _read_at_import(env), _read_at_import(self.env)
        if ours != theirs:
            return "differs: " + ", ".join(
                sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            )
        return None

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self.env,
                bufsize=0,
            )
            self.pending = b""
            ready = self._reply(None) or {}
            if not ready.get("ready"):
                raise RuntimeError(f"the fork server did not start: {ready}")
        return self.proc

    def run(self, cmd, *, cwd, env, timeout, input) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="forked-") as tmp:
            paths = {name: str(Path(tmp) / name) for name in ("stdin", "stdout", "stderr")}
            Path(paths["stdin"]).write_text(input or "", encoding="utf-8")
            request = {"argv": [str(a) for a in cmd[1:]], "cwd": str(cwd or os.getcwd()), "env": env, **paths}
            proc = self._start()
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            pid = self._reply(None)["pid"]
            status = self._reply(timeout)
            if status is None:
                os.kill(pid, signal.SIGKILL)
                self._reply(None)
            out, err = (
                Path(paths[n]).read_text(encoding="utf-8", errors="replace") for n in ("stdout", "stderr")
            )
            if status is None:
                raise subprocess.TimeoutExpired(cmd, timeout, out, err)
            return subprocess.CompletedProcess(cmd, status["returncode"], out, err)

    def _reply(self, timeout: float | None) -> dict | None:
        """The server's next JSON line; None when `timeout` seconds pass without one."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError("the fork server exited")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)


_SERVER = _Server()


def _log(how: str, cmd: list) -> None:
    """One line per launch to $EXECUTOR_SFT_FORKSERVER_LOG, where set: which launches were forked."""
    if path := os.environ.get("EXECUTOR_SFT_FORKSERVER_LOG"):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{how}\t{' '.join(map(str, cmd[1:3]))}\n")


def run_script(
    cmd: list,
    *,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    input: str | None = None,
    capture_output: bool = True,
    text: bool = True,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(cmd, capture_output=True, text=True, ...)`, forked warm where that is the same."""
    env = dict(os.environ if env is None else env)
    refused = _SERVER.refuses(cmd, env) if capture_output and text else "not captured as text"
    if refused is None and _SERVER.lock.acquire(blocking=False):
        try:
            proc = _SERVER.run(cmd, cwd=cwd, env=env, timeout=timeout, input=input)
        finally:
            _SERVER.lock.release()
        _log("forked", cmd)
        if check:
            proc.check_returncode()
        return proc
    _log(f"fresh ({refused or 'the server is busy'})", cmd)
    try:
        return subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            timeout=timeout,
            input=input,
            capture_output=capture_output,
            text=text,
            check=check,
        )
    except subprocess.TimeoutExpired as e:  # subprocess.run leaves these bytes even with text=True
        if text:
            e.output, e.stderr = (
                b.decode(errors="replace") if isinstance(b, bytes) else b for b in (e.output, e.stderr)
            )
        raise


# --- the server ---------------------------------------------------------------------------------


def _preload(log_dir: str) -> tuple[bytes, bytes]:
    """Import PRELOAD with fds 1 and 2 sent to files; returns what was printed to each."""
    import importlib

    saved = {fd: os.dup(fd) for fd in (1, 2)}
    files = {fd: open(Path(log_dir) / f"preload-{fd}", "w+b") for fd in (1, 2)}  # noqa: SIM115
    for fd, fh in files.items():
        os.dup2(fh.fileno(), fd)
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        import trl

        trl.SFTConfig, trl.GRPOConfig, trl.ModelConfig, trl.TrlParser  # noqa: B018  (TRL's lazy module)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in (1, 2):
            os.dup2(saved[fd], fd)
            os.close(saved[fd])
    printed = []
    for fh in files.values():
        fh.seek(0)
        printed.append(fh.read())
        fh.close()
    return printed[0], printed[1]


def _become(request: dict, printed: tuple[bytes, bytes], channel: tuple, base_path: list[str]) -> None:
    """In the forked child: turn into `python <script> <args>` as started with the request's settings."""
    for fh in channel:
        fh.close()
    for fd, path, flags in (
        (0, request["stdin"], os.O_RDONLY),
        (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.write(1, printed[0])
    os.write(2, printed[1])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][0]
    pythonpath = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [str(Path(script).resolve().parent), *pythonpath, *base_path]
    sys.argv = list(request["argv"])
    import runpy

    runpy.run_path(script, run_name="__main__")
    raise SystemExit(0)


def serve() -> None:
    """Read one JSON request per line on stdin, fork it, report its pid and then its status."""
    channel_in, channel_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    requests = os.fdopen(channel_in, "r", encoding="utf-8")
    replies = os.fdopen(channel_out, "w", encoding="utf-8")
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base_path = [p for p in sys.path[1:] if p not in own]
    with tempfile.TemporaryDirectory(prefix="forkserver-") as log_dir:
        printed = _preload(log_dir)
    gc.freeze()  # the children neither copy nor traverse what was imported: their exit takes 0.1 s, not 1.2 s
    if threading.active_count() != 1:  # a fork would copy a lock some other thread holds
        replies.write(json.dumps({"ready": False, "threads": threading.active_count()}) + "\n")
        return
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _become(request, printed, (requests, replies), base_path)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve()

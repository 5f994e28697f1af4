"""A launch that asks for GPUs this machine lacks stops in each process before any model loads.

`accelerate launch --config_file accelerate_configs/deepspeed_zero2.yaml` starts the processes
its config names (8) whatever the machine has; on a CPU machine each would load the model and
fail in DeepSpeed's or NCCL's set-up a minute and a half later. The launcher itself runs none of
our code, so the check runs first thing in every process, before the arguments are parsed (whose
checks fail on a CPU too, once per process): the first local process says why in one line, the
others leave quietly, all with exit status 2 (the launcher then reports the failed processes in
its own words). `use_cpu` (flag or config key) or accelerate's `--cpu` asks for no GPU.
"""

from __future__ import annotations

import os
import sys

from executor_sft.configfile import read_yaml
from executor_sft.errors import ConfigError, first_local_process


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def _asks_for_cpu(argv: list[str]) -> bool:
    """`--use_cpu [true]` on the command line, else `use_cpu: true` in its `--config` file."""
    if "--use_cpu" in argv:
        value = argv[argv.index("--use_cpu") + 1 : argv.index("--use_cpu") + 2]
        return not value or value[0].startswith("--") or value[0].lower() in ("true", "1", "yes")
    if "--config" in argv[:-1]:
        try:
            return bool(read_yaml(argv[argv.index("--config") + 1]).get("use_cpu"))
        except (ConfigError, AttributeError):
            return False  # the parser says what is wrong with the file
    return False


def launch_problem(argv: list[str]) -> str | None:
    """Why this process cannot run as launched with `argv` (None: it can)."""
    import torch

    processes = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 1)
    on_cpu = _flag("ACCELERATE_USE_CPU") or _asks_for_cpu(argv)
    backend = (
        "DeepSpeed" if _flag("ACCELERATE_USE_DEEPSPEED") else "FSDP" if _flag("ACCELERATE_USE_FSDP") else None
    )
    if on_cpu or (processes == 1 and backend is None):
        return None
    gpus = torch.cuda.device_count()
    if gpus >= processes:
        return None
    asked = f"{processes} GPU process{'es' if processes > 1 else ''}" + (
        f" with {backend}" if backend else ""
    )
    return (
        f"accelerate launch: the launch asks for {asked} and this machine has {gpus} GPU"
        f"{'' if gpus == 1 else 's'}; on a CPU machine drop --config_file (one process), or pass "
        "--num_processes to match the GPUs"
    )


def refuse_impossible_launch(argv: list[str] | None = None) -> None:
    """Print `launch_problem`'s line in the first local process, and leave every process with exit
    status 2, when there is one (one line, not one per process)."""
    argv = sys.argv[1:] if argv is None else argv
    problem = launch_problem(argv)
    if problem is None:
        return
    if first_local_process():
        print(f"error: {problem}", file=sys.stderr)
    raise SystemExit(2)

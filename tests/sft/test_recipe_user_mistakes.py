"""SFT's command as a user types it: a mistake is one line and exit 2 before anything loads or is
written, a launch asking for GPUs this machine lacks is one line, and Ctrl-C while training keeps
a checkpoint that the same command resumes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from one_line import one_error_line
from slow import launches

from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "sft_executor.py")
TINY = ["--model_name_or_path", "offline:tiny-qwen3", "--max_length", "4096", "--disable_tqdm", "true"]


def _run(args: list[str], cwd: Path, timeout: int = 600, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, RECIPE, *args],
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_typo_in_the_data_files_extension_is_a_missing_local_file_with_the_near_one(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "sft.jsonl").write_text((REPO / "data" / "sft.jsonl").read_text())
    started = time.monotonic()
    line = one_error_line(_run(["--dataset_name", "runs/sft.jsnol", "--output_dir", "out"], tmp_path))
    assert line.startswith("error: runs/sft.jsnol: SFT data file not found (--dataset_name)")
    assert "did you mean 'runs/sft.jsonl'?" in line and "hf://org/name" in line
    assert time.monotonic() - started < 60  # no Hub retries
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE=1 forbids reaching the hub"),
        ({"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:{port}"}, "did not answer in 5 s"),
    ],
    ids=["offline", "no-network"],
)
def test_push_to_hub_without_the_hub_is_one_line_before_training(tmp_path, env, says):
    env = {k: v.format(port=_closed_port()) for k, v in env.items()}
    proc = _run(
        [*TINY, "--push_to_hub", "true", "--hub_model_id", "me/x", "--output_dir", "out"], tmp_path, **env
    )
    line = one_error_line(proc)
    assert line.startswith("error: --push_to_hub: ") and says in line
    assert "the checkpoint stays local" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_deepspeed_row_on_a_cpu_machine_is_one_line_from_one_process(tmp_path):
    """docs/sft.md's GPU row verbatim: its accelerate config starts 8 processes."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "accelerate.commands.launch",
            "--config_file", "accelerate_configs/deepspeed_zero2.yaml",
            "recipes/sft_executor.py", "--config", "recipes/configs/sft_qwen3_1.7b.yaml",
            "--output_dir", str(tmp_path / "out"),
        ],
        cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    ours = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert ours == [
        "error: accelerate launch: the launch asks for 8 GPU processes with DeepSpeed and this machine has "
        "0 GPUs; on a CPU machine drop --config_file (one process), or pass --num_processes to match the GPUs"
    ], stderr_tail(proc.stderr)
    assert proc.returncode != 0 and not (tmp_path / "out").exists()


def _interrupt_after_first_step(cmd: list[str], cwd: Path) -> tuple[int, str]:
    """Start `cmd` as a terminal's foreground job, Ctrl-C it (SIGINT to its process group) once
    it has logged a step, and return its exit status and output."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen, deadline = [], time.monotonic() + 600
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if "'loss'" in line or time.monotonic() > deadline:
            break
    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=600)
    return proc.returncode, "".join(seen) + rest


@pytest.mark.parametrize(
    "launcher",
    [
        launches("sft_executor", [sys.executable], id="python"),
        launches(
            "sft_executor", [str(Path(sys.executable).parent / "accelerate"), "launch"], id="accelerate"
        ),
    ],
)
def test_ctrl_c_while_training_saves_a_checkpoint_that_the_same_command_resumes(tmp_path, launcher):
    out = tmp_path / "out"
    args = [*TINY, "--output_dir", str(out), "--max_steps", "400", "--logging_steps", "1"]
    cmd = [*launcher, RECIPE, *args]
    status, output = _interrupt_after_first_step(cmd, REPO)
    saved = sorted(p.name for p in out.glob("checkpoint-*"))
    assert len(saved) == 1, output[-3000:]
    step = int(saved[0].split("-")[1])
    assert (
        f"interrupted: SIGINT: stopped at step {step} of 400; saved {out}/checkpoint-{step}; "
        "run the same command again to resume from it" in output
    ), output[-3000:]
    if launcher == [sys.executable]:
        assert status == 130 and "Traceback" not in output, output[-3000:]
    assert not (out / "model.safetensors").exists()  # not a finished run
    resumed = _run([*args, "--max_steps", str(step + 1)], REPO)
    assert resumed.returncode == 0, stderr_tail(resumed.stderr)
    assert f"resuming from {out}/checkpoint-{step}" in resumed.stderr


EMPTY_MARKERS = "{% for m in messages %}{{ m.content }}{% generation %}{% endgeneration %}{% endfor %}"
NO_MARKERS = "{% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--trainable_layers", "999"],
            "error: --trainable_layers 999: offline:smollm2 has 30 decoder layers; give 1 to 30",
        ),
        (
            ["--trainable_layers", "0"],
            "error: command line: trainable_layers=0: give at least 1, or leave it unset",
        ),
        (
            ["--attn_implementation", "grouped_spda"],
            "error: --attn_implementation grouped_spda: no such attention kernel; did you mean 'grouped_sdpa'?",
        ),
        (
            ["--training_chat_template", "{tmp}/empty.jinja"],
            "error: {tmp}/empty.jinja: its {{% generation %}} markers wrap nothing",
        ),
        (
            ["--training_chat_template", "{tmp}/none.jinja"],
            "error: {tmp}/none.jinja: has no {{% generation %}} markers",
        ),
    ],
    ids=["layers-999", "layers-0", "attention-typo", "markers-wrap-nothing", "no-markers"],
)
def test_a_model_option_the_model_cannot_take_is_one_line_before_it_loads(tmp_path, args, line):
    (tmp_path / "empty.jinja").write_text(EMPTY_MARKERS)
    (tmp_path / "none.jinja").write_text(NO_MARKERS)
    args = [a.format(tmp=tmp_path) for a in args]
    proc = _run([*args, "--output_dir", str(tmp_path / "out")], REPO)
    assert one_error_line(proc).startswith(line.format(tmp=tmp_path))
    assert "Loading" not in proc.stderr and not (tmp_path / "out").exists()


def test_rows_in_which_the_template_marks_no_token_are_one_error_not_an_empty_dataset():
    """Markers around text that renders empty pass the template check; the rows then say it."""
    from executor_sft.errors import InputError
    from executor_sft.llm.offline import smollm2_tokenizer
    from executor_sft.sft import read_sft_jsonl
    from executor_sft.sft.train import prepare_dataset

    template = "{% for m in messages %}{{ m.content }}{% generation %}{{ '' }}{% endgeneration %}{% endfor %}"
    rows = read_sft_jsonl(REPO / "data" / "sft.jsonl")[:3]
    with pytest.raises(InputError, match=r"no row has a trained token \(3 rows\)"):
        prepare_dataset(rows, smollm2_tokenizer(), 4096, chat_template=template, disable_progress=True)

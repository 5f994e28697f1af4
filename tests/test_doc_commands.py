"""Every shell block of README.md and docs/*.md runs as written in a fresh clone, or is validated.

The one-line HTML comment right above a block says which (docs/contributing.md):

    <!-- doc-test: run -->                  bash runs the block, verbatim, in a fresh clone
    <!-- doc-test: validate -- REASON -->   not run (REASON says why); each command is checked
    <!-- doc-test: gpu -- REASON -->        validated; running it needs a GPU
    <!-- doc-test: hub -- REASON -->        validated; running it needs the model hub or a hosted API

Options after the kind, each after a `;`: `file NAME = PAGE "HEADING"` first saves the
```python block under that heading of docs/PAGE as NAME in the clone (a user's own module that
the block imports); `env NAME=VALUE ...` sets variables the page tells the user to set.

A validated command is parsed by the recipe's own parser up to the first call it hands its
checked arguments or loaded config to (`CHECKPOINTS`), so its flags parse, its config loads
and validates, and every input path it names that ships with the repository or lives in the
shared data exists. A block without a classification fails.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import os
import re
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.support.docs import doc_block
from tests.support.paths import REPO_ROOT, minibench_dir, shared_dir

SHELL_LANGS = ("bash", "sh", "shell", "console")
KINDS = ("run", "validate", "gpu", "hub")
DIRECTIVE = re.compile(r"<!--\s*doc-test:\s*(?P<body>.*?)\s*-->")
RUN_TIMEOUT_S = 1800  # the slowest block (SmolLM2 collection) takes minutes idle, 15+ on a busy 2-core box
FILE_OPTION = re.compile(r'file (?P<name>[\w.-]+) = (?P<page>[\w.-]+\.md) "(?P<heading>[^"]+)"')
ENV_OPTION = re.compile(r"env(?P<pairs>( [A-Z_][A-Z0-9_]*=\S+)+)")


@dataclasses.dataclass(frozen=True)
class DocBlock:
    page: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    text: str
    kind: str | None
    reason: str = ""
    files: tuple[tuple[str, str, str], ...] = ()  # (file name, docs page, heading)
    env: tuple[tuple[str, str], ...] = ()
    problem: str | None = None  # a directive that does not parse

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def doc_pages(root: Path = REPO_ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _directive_above(lines: list[str], fence: int) -> str | None:
    """The doc-test comment among the blank and comment lines right above line index `fence`."""
    i = fence - 1
    while i >= 0:
        text = lines[i].strip()
        if text and not (text.startswith("<!--") and text.endswith("-->")):
            return None
        if m := DIRECTIVE.fullmatch(text):
            return m["body"]
        i -= 1
    return None


def _parse_directive(
    body: str,
) -> tuple[str, str, tuple[tuple[str, str, str], ...], tuple[tuple[str, str], ...]]:
    head, _, reason = body.partition(" -- ")
    kind, *options = (part.strip() for part in head.split(";"))
    files, env = [], []
    for option in options:
        if m := FILE_OPTION.fullmatch(option):
            files.append((m["name"], m["page"], m["heading"]))
        elif m := ENV_OPTION.fullmatch(option):
            env.extend(tuple(pair.split("=", 1)) for pair in m["pairs"].split())
        else:
            raise ValueError(f'option {option!r}: expected file NAME = PAGE "HEADING" or env NAME=VALUE ...')
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
    if kind != "run" and not reason.strip():
        raise ValueError(f"'{kind}' needs a reason: <!-- doc-test: {kind} -- why it is not run -->")
    return kind, reason.strip(), tuple(files), tuple(env)


def fenced_blocks(page: Path) -> Iterator[tuple[int, str, str]]:
    """(index of the opening fence's line, language, text without the fence's indent) per block."""
    lines = page.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)\s*$", lines[i])
        if m is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if re.match(r"^\s*```\s*$", lines[j]))
        indent = len(lines[i]) - len(lines[i].lstrip())
        yield i, m[1], "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        i = end + 1


def shell_blocks(page: Path, root: Path = REPO_ROOT) -> list[DocBlock]:
    """Every fenced shell block of `page`, with the classification written above it."""
    lines = page.read_text(encoding="utf-8").split("\n")
    blocks = []
    for i, lang, text in fenced_blocks(page):
        if lang not in SHELL_LANGS:
            continue
        where = str(page.relative_to(root))
        body = _directive_above(lines, i)
        if body is None:
            blocks.append(DocBlock(where, i + 1, text, None))
        else:
            try:
                blocks.append(DocBlock(where, i + 1, text, *_parse_directive(body)))
            except ValueError as exc:
                blocks.append(DocBlock(where, i + 1, text, None, problem=str(exc)))
    return blocks


def python_problems(page: Path, root: Path = REPO_ROOT) -> list[str]:
    """`page:line: SyntaxError ...` for each ```python block that does not compile.

    Top-level `await` is allowed: such a block is what a user types into `python -m asyncio`
    or a notebook. `line` is the page's line of the error."""
    problems = []
    for i, lang, text in fenced_blocks(page):
        if lang != "python":
            continue
        try:
            compile(text, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        except SyntaxError as exc:
            line = i + 1 + (exc.lineno or 1)
            problems.append(f"{page.relative_to(root)}:{line}: SyntaxError: {exc.msg}")
    return problems


def classification_problems(blocks: list[DocBlock]) -> list[str]:
    problems = []
    for b in blocks:
        if b.problem:
            problems.append(f"{b.id}: <!-- doc-test: ... -->: {b.problem}")
        elif b.kind is None:
            problems.append(
                f"{b.id}: shell block without a classification: put <!-- doc-test: run --> (or "
                "validate/gpu/hub -- REASON) on the line above it (docs/contributing.md)"
            )
        for name, page, heading in b.files:
            try:
                doc_block(page, heading)
            except LookupError as exc:
                problems.append(f"{b.id}: file {name}: {exc}")
    return problems


BLOCKS = [block for page in doc_pages() for block in shell_blocks(page)]
RUN = [b for b in BLOCKS if b.kind == "run"]
VALIDATE = [b for b in BLOCKS if b.kind in ("validate", "gpu", "hub")]


def test_every_shell_block_is_classified():
    assert len(BLOCKS) >= 20  # README.md and docs/*.md hold this many; the extraction found them
    assert classification_problems(BLOCKS) == []


def test_a_block_without_classification_fails(tmp_path):
    page = tmp_path / "README.md"
    page.write_text(
        "# t\n\n<!-- doc-test: run -->\n```bash\necho ok\n```\n\n```sh\necho unmarked\n```\n\n"
        "<!-- doc-test: gpu -->\n```console\nnvidia-smi\n```\n\n<!-- doc-test: maybe -- ? -->\n"
        "```bash\ntrue\n```\n\n```python\nprint('not shell')\n```\n",
        encoding="utf-8",
    )
    blocks = shell_blocks(page, tmp_path)
    assert [(b.line, b.kind) for b in blocks] == [(4, "run"), (8, None), (13, None), (18, None)]
    problems = classification_problems(blocks)
    assert [p.split(":")[1] for p in problems] == ["8", "13", "18"]
    assert "without a classification" in problems[0]
    assert "'gpu' needs a reason" in problems[1] and "kind 'maybe'" in problems[2]


def test_every_python_block_compiles():
    pages = doc_pages()
    assert sum(lang == "python" for page in pages for _, lang, _ in fenced_blocks(page)) >= 15
    assert [p for page in pages for p in python_problems(page)] == []


def test_a_python_block_that_does_not_compile_is_named_by_its_line(tmp_path):
    page = tmp_path / "README.md"
    page.write_text(
        "# t\n\n```python\nx = await f()\n```\n\n```python\nimport os\n"
        "load(open('c.jsonl')  # a comment)\n```\n\n```bash\nload(\n```\n",
        encoding="utf-8",
    )
    assert python_problems(page, tmp_path) == ["README.md:9: SyntaxError: '(' was never closed"]


# --- run: the block as written, by bash, in one fresh clone shared by every run block -----------


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh clone of this checkout: HEAD, plus uncommitted changes and files git does not ignore."""
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: the doc commands run in a fresh clone of one")
    dest = tmp_path_factory.mktemp("doc-commands") / "executor_sft"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(dest)], check=True)
    diff = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "diff", "HEAD", "--binary"], check=True, capture_output=True
    ).stdout
    if diff:
        subprocess.run(["git", "-C", str(dest), "apply", "--binary", "-"], input=diff, check=True)
    untracked = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "--others", "--exclude-standard", "-z"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for name in filter(None, untracked.split("\0")):  # new files not yet committed, as a user has them
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, dest / name)
    return dest


def _user_env(clone: Path) -> dict[str, str]:
    """A user's shell in the clone: the shared data where this machine has it, no model hub."""
    return {
        **os.environ,
        "PYTHONPATH": str(clone),
        "EXECUTOR_SFT_SHARED": str(shared_dir().resolve()),
        "MINIBENCH": str(minibench_dir().resolve()),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _write_files(block: DocBlock, root: Path) -> None:
    for name, page, heading in block.files:
        (root / name).write_text(doc_block(page, heading), encoding="utf-8")


def bash_in(clone: Path, text: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`text` run by bash in the clone as a user's shell would, stopped (the whole process group)
    after RUN_TIMEOUT_S."""
    proc = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", "-c", text],
        cwd=clone,
        env={**_user_env(clone), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, so a timeout stops the recipe it runs too
    )
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"{text.strip()}: still running after {RUN_TIMEOUT_S} s:\n{(stdout + stderr)[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.id)
def test_run_block(block: DocBlock, clone: Path, minibench_corpus_path):
    _write_files(block, clone)
    proc = bash_in(clone, block.text, dict(block.env))
    output = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"{block.id} failed (exit {proc.returncode}):\n{output}"
    assert "Traceback (most recent call last)" not in proc.stderr, output


# --- README command 1, then distillation and GRPO from its output: the documented CPU chain ---

SFT_COMMAND = "python recipes/sft_executor.py"  # README command 1, after its set-up
WORLD_INDEX_COMMAND = (
    "python recipes/build_index.py --corpus data/world/corpus.jsonl --output .cache/indexes/world-bm25 --bm25"
)
GRPO_COMMAND = (
    "python recipes/grpo_executor.py --config recipes/configs/grpo_cpu.yaml --model_name_or_path outputs/sft-default \\\n"
    "    --max_steps 1"
)
DISTILL_COMMAND = (
    "python recipes/distill_executor.py --config recipes/configs/distill_tiny.yaml --model_name_or_path \\\n"
    "    outputs/sft-default --teacher_model_name_or_path offline:smollm2 --output_dir outputs/distill-default"
)
GRPO_DISTILLED_COMMAND = (
    "python recipes/grpo_executor.py --config recipes/configs/grpo_cpu.yaml --model_name_or_path \\\n"
    "    outputs/distill-default --output_dir outputs/grpo-distilled --max_steps 1"
)
NOISE = {
    "DEBUG:bm25s": re.compile(r"DEBUG:bm25s"),
    "DeepSpeed's accelerator probe": re.compile(r"Setting ds_accelerator|\[real_accelerator\.py"),
    "TRL's experimental-feature notice": re.compile(r"which is an experimental feature"),
}
UNROUNDED = re.compile(r"\d\.\d{7,}")
REPORT_LINE = re.compile(r"^(\{'|\[executor_sft\]|GRPO done)")  # what the recipes and the trainer log print


def _noise(text: str) -> list[str]:
    found = [f"{what}: {m.group(0)!r}" for what, pattern in NOISE.items() if (m := pattern.search(text))]
    reports = [line for line in text.splitlines() if REPORT_LINE.match(line)]
    return found + [f"an unrounded float: {line!r}" for line in reports if UNROUNDED.search(line)]


SFT_DONE = re.compile(
    r"\[executor_sft\] trained offline:smollm2 on (?P<rows>\d+) rows \(\d+ rows, max_length=(?P<max_length>\d+), "
    r"[^)]*?(?P<shortened>\d+) with shortened passages .*?\); train_loss=(?P<loss>\d\.\d{1,4});"
)


def command_1_figure_problems(trained: re.Match, steps: int, root: Path = REPO_ROOT) -> list[str]:
    """Each page's figures of README command 1 (steps, rows, shortened rows, max_length, train
    loss) that differ from what the run printed: each phrase is written out from the run's
    figures and must appear in its page as written."""
    rows, shortened, max_length, loss = (
        trained["rows"],
        trained["shortened"],
        trained["max_length"],
        trained["loss"],
    )
    expected = {
        "README.md": [f"for {steps} steps\non `data/sft.jsonl`"],
        "docs/sft.md": [
            f"{steps} steps on the {rows} rows of the pipeline's `data/sft.jsonl`, {shortened} of them with\n"
            f"shortened passages at `max_length` {max_length}"
        ],
        "docs/results.md": [
            f"{rows} rows, {shortened} with shortened passages, train loss {loss}; relaunched: no training"
        ],
        "docs/timings.md": [f"{steps} steps with `gathered_loss`", f"train loss {loss}; relaunched"],
    }
    return [
        f"{page}: says no more {phrase!r}"
        for page, phrases in expected.items()
        for phrase in phrases
        if phrase not in (root / page).read_text(encoding="utf-8")
    ]


def test_command_1_figures_are_compared_with_the_run():
    """The docs' figures of README command 1 as the run prints them (the slow test below runs it)."""
    line = (
        "[executor_sft] trained offline:smollm2 on 79 rows (79 rows, max_length=1024, policy=truncate_tool: "
        "76 whole, 3 with shortened passages (30 passage tokens removed), 0 dropped); train_loss=0.5914; saved to x"
    )
    trained = SFT_DONE.search(line)
    assert (trained["rows"], trained["shortened"], trained["max_length"], trained["loss"]) == (
        "79",
        "3",
        "1024",
        "0.5914",
    )
    assert command_1_figure_problems(trained, 8) == []
    other = SFT_DONE.search(line.replace("=0.5914", "=0.5915").replace("3 with", "4 with"))
    assert [p.split(":")[0] for p in command_1_figure_problems(other, 9)] == [
        "README.md", "docs/sft.md", "docs/results.md", "docs/timings.md", "docs/timings.md"
    ]  # fmt: skip


@pytest.mark.slow
def test_readme_command_1_then_distillation_then_grpo(clone: Path):
    """README command 1's training command as written (SmolLM2, 8 steps, outputs/sft-default), its
    relaunch, another model into the same folder, then docs/post_training.md's CPU path from that
    output as written: one GRPO step from it, its distillation, one GRPO step from the distilled model."""
    readme = next(b for b in BLOCKS if b.page == "README.md" and "scripts/setup.sh" in b.text)
    assert f"bash scripts/setup.sh && {SFT_COMMAND}\n" in readme.text  # the command this test runs
    cpu_path = next(b for b in BLOCKS if b.page == "docs/post_training.md" and GRPO_COMMAND in b.text)
    for command in (WORLD_INDEX_COMMAND, SFT_COMMAND, GRPO_COMMAND, DISTILL_COMMAND, GRPO_DISTILLED_COMMAND):
        assert f"{command}\n" in cpu_path.text, command

    sft = bash_in(clone, SFT_COMMAND)
    assert sft.returncode == 0, (sft.stdout + sft.stderr)[-6000:]
    trained = SFT_DONE.search(sft.stdout)
    assert trained, sft.stdout[-2000:]
    assert _noise(sft.stdout + sft.stderr) == []
    card = (clone / "outputs" / "sft-default" / "README.md").read_text(encoding="utf-8")
    assert str(clone) not in card  # data named relative to the checkout, not by this machine's path

    again = bash_in(clone, SFT_COMMAND)
    finished = re.search(
        r"outputs/sft-default already holds a finished run \(step (\d+), train_loss=([\d.]+)\)", again.stdout
    )
    assert again.returncode == 0 and finished, again.stdout[-2000:]
    assert finished[2] == trained["loss"]
    assert command_1_figure_problems(trained, int(finished[1])) == []

    # docs/sft.md's tiny example without its own --output_dir: refused, never reported as done
    other = bash_in(
        clone, "python recipes/sft_executor.py --model_name_or_path offline:tiny-qwen3 --max_steps 2"
    )
    assert other.returncode == 2, (other.stdout + other.stderr)[-3000:]
    line = other.stderr.strip().splitlines()[-1]
    assert line.startswith("error: outputs/sft-default: holds a finished run trained with other settings")
    assert 'model ("offline:smollm2" -> "offline:tiny-qwen3")' in line and "Traceback" not in other.stderr
    assert "already holds a finished run" not in other.stdout

    logs = ""
    for command, done, saved in (
        (WORLD_INDEX_COMMAND, "", "indexes/world-bm25/manifest.json"),
        (GRPO_COMMAND, "GRPO done: 1 step;", "grpo-cpu/model.safetensors"),
        (DISTILL_COMMAND, "distillation done: 2 steps", "distill-default/model.safetensors"),
        (GRPO_DISTILLED_COMMAND, "GRPO done: 1 step;", "grpo-distilled/model.safetensors"),
    ):
        proc = bash_in(clone, command)
        output = (proc.stdout + proc.stderr)[-6000:]
        assert proc.returncode == 0 and done in proc.stdout, f"{command}\n{output}"
        root = clone / (".cache" if saved.startswith("indexes") else "outputs")
        assert (root / saved).is_file(), f"{command}: no {saved}"
        if saved.endswith("model.safetensors"):  # each stage's checkpoint says what it is
            card = (root / saved).with_name("README.md").read_text(encoding="utf-8")
            assert "## Quick start" in card and "## Training procedure" in card, f"{command}: {card[:2000]}"
            assert str(clone) not in card, f"{command}: the card holds an absolute path"
        logs += proc.stdout + proc.stderr
    assert _noise(logs) == []


# --- validate: each command parsed by its recipe's own parser, inputs resolved -----------------


class Checked(BaseException):
    """Raised at the first call a command hands its checked arguments or config to; stops the run."""

    def __init__(self, where: str, value: Any):
        super().__init__(where)
        self.where, self.value = where, value


CHECKPOINTS = (
    ("executor_sft.configfile", "parse_trl_args"),  # every TRL-dataclass recipe
    ("executor_sft.eval", "load_eval_config"),
    ("executor_sft.eval.sweep", "load_sweep_config"),
    ("executor_sft.eval.eval_set", "load_eval_set_config"),
    ("executor_sft.rollout", "load_collect_config"),
    ("executor_sft.demos.demo", "load_config"),
    ("executor_sft.eval.ablation", "load_ablation_config"),
)
"""(module, function): where a recipe's parsed arguments or loaded config are complete.

Recipes import these by name, so each is replaced on its module before the recipe runs. A
command line parser without `--config` (nothing left to load) is a checkpoint of its own."""

PRODUCED = ("runs", "outputs", "indexes", ".cache")  # what the documented steps themselves write
OUTPUT_KEYS = {"output", "output_dir", "out", "report", "results", "cells_dir", "judge_cache", "logging_dir"}
NOT_OURS = {
    "curl": "an HTTP request to the server the block starts",
    "trl": "TRL's own command line",
    "ruff": "CI runs it (.ci/run)",
    "ray": "Ray's own command line (cluster start-up)",
    "vllm": "vLLM's own server",
    "kubectl": "Kubernetes' own command line",
}


def _parts(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, leaf) of parsed arguments: dataclasses, pydantic models, namespaces, mappings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _parts(getattr(value, f.name), f"{key}.{f.name}".lstrip("."))
    elif isinstance(value, BaseModel):
        yield from _parts(value.model_dump(mode="json"), key)
    elif isinstance(value, argparse.Namespace):
        yield from _parts(vars(value), key)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _parts(v, f"{key}.{k}".lstrip("."))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _parts(v, f"{key}.{i}".lstrip("."))
    else:
        yield key, value


def missing_inputs(parsed: Any, root: Path) -> list[str]:
    """Input paths (not outputs) that ship with the repository or the shared data, and are absent.

    A path under what the steps write (runs/, outputs/, indexes/, .cache/) may come from an
    earlier step; a name whose first part is no folder of the repository is a hub id."""
    tracked = {p.name for p in root.iterdir()} - set(PRODUCED)
    missing = []
    for key, value in _parts(parsed):
        if key.rsplit(".", 1)[-1] in OUTPUT_KEYS or not isinstance(value, str | Path):
            continue
        text = str(value)
        if "/" not in text or not re.fullmatch(r"[\w.~/@+-]+", text):
            continue
        first = text.split("/", 1)[0]
        local = text.startswith(("/", "./", "../", "~")) or first in tracked
        if local and not Path(text).expanduser().exists():
            missing.append(f"{key}={text}")
    return missing


@contextlib.contextmanager
def checkpoints() -> Iterator[None]:
    import importlib

    inside = [0]

    def stopping(where: str, real):
        def call(*args, **kwargs):
            inside[0] += 1
            try:
                value = real(*args, **kwargs)
            finally:
                inside[0] -= 1
            raise Checked(where, value)

        return call

    real_parse = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        parsed = real_parse(self, args, namespace)
        if not inside[0] and not any("--config" in a.option_strings for a in self._actions):
            raise Checked(f"{self.prog} (argparse)", parsed)
        return parsed

    with pytest.MonkeyPatch.context() as patch:
        for module, attr in CHECKPOINTS:
            mod = importlib.import_module(module)
            patch.setattr(mod, attr, stopping(f"{module}.{attr}", getattr(mod, attr)))
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
        yield


_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")


def _substitute(text: str, root: Path) -> str:
    """Each `$(command)` replaced by what the command prints, run by bash in `root` as a user's
    shell would run it (a failing command fails the block)."""

    def output(match: re.Match) -> str:
        done = subprocess.run(
            ["bash", "-c", match.group(1)], cwd=root, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"$({match.group(1)}) failed: {done.stderr.strip()[-300:]}"
        return done.stdout.strip()

    return _SUBSTITUTION.sub(output, text)


def _commands(text: str) -> list[tuple[dict[str, str], list[str]]]:
    """(env assignments, argv) per command of a block, with the docs' shorthand written out.

    `SCRIPT ...` repeats the arguments of the block's previous command of that script, and a
    trailing `...` is dropped; a line that starts with `--` or `...` continues the previous
    command; `[--flag x]` is an option shown as optional; `&&` chains commands; `nohup`, `nice [-n N]`,
    redirections and a trailing `&` belong to the shell, not to the command."""
    joined = re.sub(r"\\\n", " ", text)
    out: list[tuple[dict[str, str], list[str]]] = []
    base: tuple[dict[str, str], list[str]] | None = None  # the last command written out in full
    for line in joined.splitlines():
        tokens = shlex.split(line, comments=True)
        if not tokens:
            continue
        if tokens[0].startswith("--") or tokens[0] == "...":
            assert base, f"{line!r} continues no command"
            out.append((base[0], [*base[1], *[t for t in tokens if t != "..."]]))
            continue
        chain: list[list[str]] = [[]]
        for token in tokens:
            chain.append([]) if token == "&&" else chain[-1].append(token)
        for part in chain:
            out.append(base := _one_command(part, out))
    return out


def _one_command(tokens: list[str], earlier) -> tuple[dict[str, str], list[str]]:
    env = {}
    while tokens and re.fullmatch(r"[A-Z_]+=\S*", tokens[0]):
        name, _, value = tokens.pop(0).partition("=")
        env[name] = value
    while tokens and tokens[0] in ("nohup", "nice"):  # the shell's wrappers, not the command
        tokens = tokens[3:] if tokens[:2] == ["nice", "-n"] else tokens[1:]
    kept, skip = [], False
    for t in tokens:
        if skip or t == "&" or re.fullmatch(r"\d?>&\d", t):
            skip = False
            continue
        if re.fullmatch(r"\d?>>?", t):
            skip = True  # the file name that follows
            continue
        kept.append(t.removeprefix("[").removesuffix("]"))
    script = next((i for i, t in enumerate(kept) if t.endswith(".py")), None)
    if script is not None and kept[script + 1 : script + 2] == ["..."]:
        previous = next((argv for _, argv in reversed(earlier) if kept[script] in argv), None)
        assert previous, f"{' '.join(kept)}: '...' repeats no earlier {kept[script]} command"
        kept[script + 1 : script + 2] = previous[previous.index(kept[script]) + 1 :]
    return env, [t for t in kept if t != "..."]


def _python_args(argv: list[str], root: Path) -> list[str] | str:
    """The python arguments a command runs (accelerate's launcher unwrapped), or a note why none."""
    prog, *args = argv
    if prog in NOT_OURS:
        return f"{prog}: not checked ({NOT_OURS[prog]})"
    if prog == "bash":
        subprocess.run(["bash", "-n", str(root / args[0])], check=True)
        return f"bash -n {args[0]}: exists, parses"
    if prog == "accelerate":
        from accelerate.commands.launch import launch_command_parser

        assert args[0] == "launch", argv
        launch = launch_command_parser().parse_args(args[1:])
        if launch.config_file:
            assert (root / launch.config_file).is_file(), f"--config_file {launch.config_file}: not found"
        prog, args = "python", [launch.training_script, *launch.training_script_args]
    assert prog in ("python", "python3"), f"{prog}: no rule to check this command ({argv})"
    if args[:2] == ["-m", "pytest"]:
        return "pytest: not checked (this test suite)"
    if args[0].endswith(("sft_executor.py", "grpo_executor.py")):
        import torch

        if not torch.cuda.is_available():
            args = [*args, "--bf16", "false"]  # the one setting TRL checks against the device
    return args


def _run_to_checkpoint(args: list[str], root: Path) -> Checked:
    """Run `python ARGS` in this process until it reaches a checkpoint (the clone is the cwd)."""
    with checkpoints():
        try:
            if args[0] == "-m":
                sys.argv = [args[1], *args[2:]]
                runpy.run_module(args[1], run_name="__main__", alter_sys=True)
            else:
                assert (root / args[0]).is_file(), f"{args[0]}: not found"
                sys.argv = list(args)
                runpy.run_path(args[0], run_name="__main__")
        except Checked as stop:
            return stop
        except SystemExit as exc:
            raise AssertionError(f"{' '.join(args)}: exit {exc.code}") from None
    raise AssertionError(f"{' '.join(args)}: ran to the end without reaching a checkpoint")


def validate_command(env: dict[str, str], argv: list[str], root: Path) -> str:
    """Check one command as far as this machine allows; returns what was checked."""
    args = _python_args(argv, root)
    if isinstance(args, str):
        return args
    saved_env, saved_path, saved_argv = dict(os.environ), list(sys.path), list(sys.argv)
    os.environ.update({k: v for k, v in env.items() if k != "PYTHONPATH"})
    if "PYTHONPATH" in env:
        sys.path.insert(0, str((root / env["PYTHONPATH"]).resolve()))
    try:
        checked = _run_to_checkpoint(args, root)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        sys.argv = saved_argv
    missing = missing_inputs(checked.value, root)
    assert not missing, f"{' '.join(argv)}: input paths not found: {', '.join(missing)}"
    return f"{args[1] if args[0] == '-m' else args[0]}: parsed by {checked.where}"


@pytest.mark.parametrize("block", VALIDATE, ids=lambda b: b.id)
def test_validate_block(block: DocBlock, clone: Path, monkeypatch, capsys, minibench_corpus_path):
    monkeypatch.chdir(clone)
    for key, value in _user_env(clone).items():
        if key != "PYTHONPATH":
            monkeypatch.setenv(key, value)
    _write_files(block, clone)
    for key, value in block.env:
        monkeypatch.setenv(key, value)
    commands = _commands(_substitute(os.path.expandvars(block.text), clone))
    assert commands, f"{block.id}: no command found"
    notes = []
    for env, argv in commands:
        try:
            notes.append(validate_command(env, argv, clone))
        except AssertionError as exc:
            err = capsys.readouterr().err.strip().splitlines()
            raise AssertionError(f"{block.id}: {exc}; {err[-1] if err else ''}") from None
    print(f"{block.id} [{block.kind}] " + "; ".join(notes))


@pytest.mark.parametrize(
    ("command", "found"),
    [
        (
            "python recipes/filter_trajectories.py --rollouts data/rollouts.jsonl --output x --no_such_flag",
            "exit 2",
        ),
        (
            "python recipes/filter_trajectories.py --rollouts data/gone.jsonl --output x",
            "rollouts=data/gone.jsonl",
        ),
        (
            "python recipes/evaluate.py --config recipes/configs/eval_minibench_smollm2.yaml --set samplez=1",
            "exit 2",
        ),
        ("python recipes/collect_rollouts.py --config recipes/configs/no_such.yaml", "exit 2"),
        ("accelerate launch --config_file accelerate_configs/none.yaml recipes/sft_executor.py", "not found"),
        ("python recipes/no_such_recipe.py --help", "not found"),
    ],
)
def test_validation_fails_where_a_user_would(command, found, clone, monkeypatch):
    """The checks are not vacuous: a wrong flag, input, config key or file fails them."""
    monkeypatch.chdir(clone)
    ((env, argv),) = _commands(command)
    with pytest.raises(AssertionError, match=re.escape(found)):
        validate_command(env, argv, clone)

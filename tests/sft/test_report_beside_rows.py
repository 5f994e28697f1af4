"""The documented filter commands write the composition report where the SFT looks for it.

README's CPU path filters into `runs/sft.jsonl` and trains on it; docs/filters.md and
docs/rollout.md filter with their own `--report`. Each filter command runs as written (the
collection output of docs/rollout.md stands in as a copy of the sample rollouts), then the
SFT command's `--dataset_name` (parsed by `recipes/sft_executor.py`'s own parser where the page
has one) goes through `find_composition_report`, the lookup `train_executor` calls for the card.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from script_modules import load_script

from executor_sft.sft import train
from executor_sft.sft.data import find_composition_report
from tests.support.paths import REPO_ROOT
from tests.support.recipes import stderr_tail

FILTER = "recipes/filter_trajectories.py"
SFT = "recipes/sft_executor.py"
PAGES = ("README.md", "docs/filters.md", "docs/rollout.md")


def _commands(page: str) -> list[list[str]]:
    """Each command line of the page's shell blocks, continuation lines joined, comments dropped."""
    text = (REPO_ROOT / page).read_text(encoding="utf-8")
    blocks = re.findall(r"^```(?:bash|sh|console)\n(.*?)^```", text, re.M | re.S)
    lines = re.sub(r"\\\n", " ", "\n".join(blocks)).splitlines()
    return [tokens for line in lines if (tokens := shlex.split(line, comments=True))]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _documented() -> list[tuple[str, list[str], list[str] | None]]:
    """(page, filter argv, the SFT argv that follows it on the page or None) per filter command
    that writes a report."""
    found = []
    for page in PAGES:
        commands = _commands(page)
        for i, argv in enumerate(commands):
            if FILTER in argv and "--report" in argv:
                after = next((c for c in commands[i + 1 :] if SFT in c), None)
                found.append((page, argv[argv.index(FILTER) + 1 :], after))
    return found


DOCUMENTED = _documented()


def test_the_pages_document_the_commands_this_test_runs():
    assert [page for page, _, _ in DOCUMENTED] == [
        "README.md",
        "docs/filters.md",
        "docs/filters.md",
        "docs/rollout.md",
    ]
    readme_sft = DOCUMENTED[0][2]
    assert readme_sft is not None and _flag(readme_sft, "--dataset_name") == "runs/sft.jsonl"
    assert train.find_composition_report is find_composition_report  # the lookup the recipe's training calls


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "args", "sft"), DOCUMENTED, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(DOCUMENTED)]
)
def test_the_sft_finds_the_report_the_filter_wrote(page, args, sft, tmp_path, monkeypatch):
    rollouts = tmp_path / _flag(args, "--rollouts")
    rollouts.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "data" / "rollouts.jsonl", rollouts)  # the sample rollouts, or a stand-in
    (tmp_path / "recipes").symlink_to(REPO_ROOT / "recipes")  # --config recipes/configs/... as written
    argv = [a for a in args if a not in ("--allow_empty", "true")]  # the stand-in keeps rows
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / FILTER), *argv],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    written = json.loads((tmp_path / _flag(args, "--report")).read_text(encoding="utf-8"))

    monkeypatch.chdir(tmp_path)
    if sft is None:  # no SFT command on the page: the one a user would run on these rows
        dataset, given = _flag(args, "--output"), None
    else:
        script_args, _, _ = load_script(SFT).parse_args(sft[sft.index(SFT) + 1 :])
        dataset, given = script_args.dataset_name, script_args.composition_report
    assert dataset == _flag(args, "--output")
    assert find_composition_report(dataset, given) == written, (
        f"{page}: the SFT on {dataset} does not find the report written to {_flag(args, '--report')}"
    )


def test_a_report_under_another_name_is_not_found(tmp_path):
    """What README's command did before: the lookup misses a report named otherwise."""
    (tmp_path / "sft.jsonl").write_text("")
    (tmp_path / "sft_report.json").write_text("{}")
    assert find_composition_report(tmp_path / "sft.jsonl") is None
    assert find_composition_report(tmp_path / "sft.jsonl", tmp_path / "sft_report.json") == {}

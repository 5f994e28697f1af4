"""Every recipe's --help: exit 0 (a `%` in a help string once crashed argparse), a paragraph of
what it does and an example command first, `--config` listed, the project's options before
TRL's, and no path of the machine it runs on."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from forkserver import run_script
from script_modules import load_script

from tests.support.recipes import stderr_tail

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes").glob("*.py"))
TRL_RECIPES = {
    # recipe: (some of the project's own options, some of TRL's)
    "sft_executor": (
        ["--dataset_name", "--fresh", "--overflow"],
        ["--learning_rate", "--model_name_or_path"],
    ),
    "grpo_executor": (["--retriever", "--reward_funcs"], ["--num_generations", "--model_name_or_path"]),
    "grpo_marl": (
        ["--credit", "--train_lead", "--deep_share"],
        ["--num_generations", "--model_name_or_path"],
    ),
}
MACHINE_PATHS = ("/work/", "/root/", "/tmp/", "/home/", "/Users/", str(REPO), str(Path.home()) + "/")
EXAMPLE = re.compile(r"^\s*(python3? |accelerate launch )\S*(recipes/|-m )", re.MULTILINE)


def _help(recipe: Path) -> str:
    proc = run_script(
        [sys.executable, str(recipe), "--help"], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, stderr_tail(proc.stderr)
    return proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_help_describes_the_recipe_first(recipe):
    text = _help(recipe)
    assert text.startswith("usage:")
    usage, _, rest = text.partition("\n\n")
    description, _, options = rest.partition("\noptions:\n")
    assert options, "no options section after the description"
    first = description.split("\n\n")[0]
    assert len(first.split()) >= 6 and not first.lstrip().startswith("-"), (
        f"no description paragraph: {first!r}"
    )
    assert EXAMPLE.search(description), "no example command in the description"
    assert re.search(r"^\s+--config\b", options, re.MULTILINE), "--config is not listed"
    leaked = [p for p in MACHINE_PATHS if p in text]
    assert not leaked, f"machine paths in --help: {leaked}"
    if recipe.stem in TRL_RECIPES:
        ours, theirs = TRL_RECIPES[recipe.stem]
        heading = text.index("\nTRL ")
        assert "[TRL options]" in usage and len(usage.splitlines()) < 25
        for flag in ["--config", *ours]:
            assert text.index(f"\n  {flag} ") < heading, f"{flag} is not among the project's options"
        for flag in theirs:
            assert text.index(f"\n  {flag} ") > heading, f"{flag} is listed before TRL's heading"
        assert re.search(r"^TRL \w+Config options:$", text, re.MULTILINE)


def _make_sample_data_module():
    return load_script("recipes/make_sample_data.py")


def test_make_sample_data_reads_a_config_that_flags_override(tmp_path):
    recipe = _make_sample_data_module()
    cfg = tmp_path / "sample.yaml"
    cfg.write_text("seed: 3\nentities: 120\n", encoding="utf-8")
    config = recipe.sample_config(recipe.parse_args(["--config", str(cfg), "--seed", "5"]))
    assert (config.seed, config.entities, config.questions) == (5, 120, 50)
    assert recipe.sample_config(recipe.parse_args([])) == recipe.SampleConfig()


def test_make_sample_data_refuses_an_unknown_config_key(tmp_path):
    cfg = tmp_path / "sample.yaml"
    cfg.write_text("entites: 120\n", encoding="utf-8")
    proc = run_script(
        [sys.executable, "recipes/make_sample_data.py", "--config", str(cfg), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {cfg}: unknown key(s) ['entites']")
    assert not (tmp_path / "o").exists()

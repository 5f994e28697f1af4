"""Bad input gets one line on stderr and exit 2, before any model loads, and no input changes.

Each case writes its inputs into tmp_path, runs a recipe as a subprocess and checks: exit
status 2, stderr names the file (and line), no traceback, every input byte-identical after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from forkserver import run_script
from slow import launches

ROOT = Path(__file__).resolve().parents[1]
ROLLOUTS = ROOT / "data" / "rollouts.jsonl"


def _head(path: Path, n: int) -> bytes:
    with path.open("rb") as fh:
        return b"".join(next(fh) for _ in range(n))


def run_recipe(recipe: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return run_script(
        [sys.executable, f"recipes/{recipe}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@dataclass
class Case:
    """Inputs to write, the recipe's arguments, and what stderr must name."""

    name: str
    recipe: str
    files: Callable[[Path], dict[str, bytes]]
    args: Callable[[Path], list[str]]
    names: Callable[[Path], str]


def _rollouts(tmp: Path) -> bytes:
    return _head(ROLLOUTS, 3)


def _filter_args(tmp: Path, output: str = "sft.jsonl") -> list[str]:
    return ["--rollouts", str(tmp / "r.jsonl"), "--output", str(tmp / output), "--no_require_judge"]


FILTER_CASES = [
    Case(
        "filter-output-is-input",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t)},
        lambda t: _filter_args(t, "r.jsonl"),
        lambda t: f"{t / 'r.jsonl'}: output is the same file",
    ),
    Case(
        "filter-output-is-input-other-spelling",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t)},
        lambda t: _filter_args(t, "./../" + t.name + "/r.jsonl"),
        lambda t: "output is the same file",
    ),
    Case(
        "filter-report-is-input",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t)},
        lambda t: [*_filter_args(t), "--report", str(t / "r.jsonl")],
        lambda t: f"{t / 'r.jsonl'}: output is the same file",
    ),
    Case(
        "filter-missing-rollouts",
        "filter_trajectories.py",
        lambda t: {},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}: --rollouts file not found",
    ),
    Case(
        "filter-empty-rollouts",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": b""},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}: no episodes",
    ),
    Case(
        "filter-non-utf8",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t) + b'{"bad": "\xff"}\n'},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}:4: not UTF-8",
    ),
    Case(
        "filter-not-json",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _head(ROLLOUTS, 1) + b"not json\n" + _head(ROLLOUTS, 1)},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}:2: invalid JSON",
    ),
    Case(
        "filter-schema-v9",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t).replace(b"executor_sft.episode/v1", b"executor_sft.episode/v9")},
        _filter_args,
        lambda t: (
            f"{t / 'r.jsonl'}:1: field 'schema' is 'executor_sft.episode/v9'; this version reads 'executor_sft.episode/v1'"
        ),
    ),
    Case(
        "filter-schema-other",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _rollouts(t).replace(b'"executor_sft.episode/v1"', b'"something/else"', 1)},
        _filter_args,
        lambda t: f"{t / 'r.jsonl'}:1: field 'schema' is 'something/else'",
    ),
]


def _all_wrong(tmp: Path) -> bytes:
    """Episodes whose every run yields a wrong answer, as a 135M executor's do."""
    lines = []
    for line in _rollouts(tmp).splitlines():
        episode = json.loads(line)
        for run in episode["runs"]:
            if run.get("outcome"):
                run["outcome"].update(em=0.0, judge=False)
        lines.append(json.dumps(episode))
    return ("\n".join(lines) + "\n").encode()


EMPTY_OUTPUT_CASES = [
    Case(
        "filter-zero-rows",
        "filter_trajectories.py",
        lambda t: {"r.jsonl": _all_wrong(t)},
        lambda t: [*_filter_args(t), "--report", str(t / "report.json")],
        lambda t: f"{t / 'r.jsonl'}: 0 of 18 runs kept (excluded: wrong_em=",
    ),
    Case(
        "grpo-data-zero-rows",
        "build_grpo_data.py",
        lambda t: {"r.jsonl": _all_wrong(t)},
        lambda t: ["--rollouts", str(t / "r.jsonl"), "--output", str(t / "grpo.jsonl")],
        lambda t: f"{t / 'r.jsonl'}: 0 GRPO examples from 3 episodes",
    ),
]

CORPUS = b"".join(b'{"id": "d%d", "contents": "passage %d about topic %d"}\n' % (i, i, i) for i in range(5))
QUESTIONS = b'{"id": "q1", "question": "which topic?", "golden_answers": ["topic 1"]}\n'


def _collect_config(tmp: Path, pipeline: str = "max_turns: 2", extra: str = "", index: str = "idx") -> bytes:
    return f"""questions: {{path: {tmp / "q.jsonl"}}}
retriever: {{index: {tmp / index}, kind: bm25, k: 3, corpus: {tmp / "c.jsonl"}}}
models:
  backbone: {{backend: transformers, model: "offline:smollm2"}}
  teacher: {{backend: transformers, model: "offline:smollm2"}}
  answerer: {{backend: transformers, model: "offline:smollm2"}}
pipeline: {{executor_roles: [teacher], driver: teacher, {pipeline}}}
output_dir: {tmp / "out"}
{extra}""".encode()


def _collect_files(tmp: Path, **config: str) -> dict[str, bytes]:
    return {"c.jsonl": CORPUS, "q.jsonl": QUESTIONS, "cfg.yaml": _collect_config(tmp, **config)}


def _collect_args(tmp: Path) -> list[str]:
    return ["--config", str(tmp / "cfg.yaml")]


COLLECT_CASES = [
    Case(
        "collect-pipeline-typo",
        "collect_rollouts.py",
        lambda t: _collect_files(t, pipeline="max_turn: 2"),
        _collect_args,
        lambda t: f"{t / 'cfg.yaml'}: invalid config: field 'pipeline.max_turn'",
    ),
    Case(
        "collect-unknown-top-level-key",
        "collect_rollouts.py",
        lambda t: _collect_files(t, extra="sampels_per_question: 2\n"),
        _collect_args,
        lambda t: f"{t / 'cfg.yaml'}: invalid config: field 'sampels_per_question'",
    ),
    Case(
        "collect-duplicate-nested-key",
        "collect_rollouts.py",
        lambda t: _collect_files(t, pipeline="max_turns: 3, max_turns: 1"),
        _collect_args,
        lambda t: f"{t / 'cfg.yaml'}:7: duplicate key 'max_turns' (first at line 7): keep one",
    ),
    Case(
        "collect-output-dir-is-a-file",
        "collect_rollouts.py",
        lambda t: {**_collect_files(t), "out": b"my file\n"},
        _collect_args,
        lambda t: f"{t / 'out'}: output_dir needs a directory here, but it is a file",
    ),
    Case(
        "collect-missing-config",
        "collect_rollouts.py",
        lambda t: {},
        _collect_args,
        lambda t: f"{t / 'cfg.yaml'}: config file not found",
    ),
    Case(
        "collect-corrupt-middle-line",
        "collect_rollouts.py",
        lambda t: {
            **_collect_files(t),
            "out/rollouts.jsonl": _head(ROLLOUTS, 1) + b"{torn\n" + _head(ROLLOUTS, 1),
        },
        _collect_args,
        lambda t: f"{t / 'out' / 'rollouts.jsonl'}:2: invalid JSON",
    ),
    Case(
        "collect-missing-index",
        "collect_rollouts.py",
        lambda t: _collect_files(t, index="no-index"),
        _collect_args,
        lambda t: (
            f"retriever.index: {t / 'no-index'}: no index there (manifest.json missing); build it with "
            f"recipes/build_index.py --corpus CORPUS --output {t / 'no-index'} --bm25"
        ),
    ),
    Case(
        "collect-index-of-another-corpus",
        "collect_rollouts.py",
        lambda t: {**_collect_files(t), "c.jsonl": CORPUS.replace(b"topic", b"other")},
        _collect_args,
        lambda t: f"index {t / 'idx'} was built from",
    ),
]

SFT_ROWS = ROOT / "data" / "sft.jsonl"


def _sft_args(tmp: Path) -> list[str]:
    return ["--dataset_name", str(tmp / "s.jsonl"), "--output_dir", str(tmp / "model")]


SFT_CASES = [
    Case(
        "sft-output-dir-holds-the-users-files",
        "sft_executor.py",
        lambda t: {
            "s.jsonl": _head(SFT_ROWS, 2),
            "model/README.md": b"# mine\n",
            "model/config.json": b"{}\n",
        },
        _sft_args,
        lambda t: f"{t / 'model'}: --output_dir is not empty and no executor_sft run made it",
    ),
    Case(
        "sft-missing-data",
        "sft_executor.py",
        lambda t: {},
        _sft_args,
        lambda t: f"{t / 's.jsonl'}: SFT data file not found",
    ),
    Case(
        "sft-row-without-messages",
        "sft_executor.py",
        lambda t: {"s.jsonl": _head(SFT_ROWS, 2) + b'{"prompt": "no messages here"}\n'},
        _sft_args,
        lambda t: f"{t / 's.jsonl'}:3: field 'messages' must be a non-empty list",
    ),
]

# Every TrlParser recipe reads `--config` through configfile.parse_trl_args.
TRL_RECIPES = (
    "sft_executor.py",
    "grpo_executor.py",
    "grpo_marl.py",
    "build_wide_data.py",
    "build_grpo_data.py",
    "filter_trajectories.py",
    "build_index.py",
    "serve_retriever.py",
)
CONFIG_CASES = [
    Case(
        f"config-unknown-key-{recipe.removesuffix('.py')}",
        recipe,
        lambda t: {"c.yaml": b"# a typo on line 2\nlearning_rat: 0.1\n"},
        lambda t: ["--config", str(t / "c.yaml")],
        lambda t: f"{t / 'c.yaml'}:2: unknown key 'learning_rat'",
    )
    for recipe in TRL_RECIPES
] + [
    Case(
        "config-duplicate-key",
        "filter_trajectories.py",
        lambda t: {"c.yaml": b"rollouts: r.jsonl\nmin_searches: 2\noutput: o.jsonl\nmin_searches: 1\n"},
        lambda t: ["--config", str(t / "c.yaml")],
        lambda t: f"{t / 'c.yaml'}:4: duplicate key 'min_searches' (first at line 2): keep one",
    ),
    Case(
        "config-missing-file",
        "sft_executor.py",
        lambda t: {},
        lambda t: ["--config", str(t / "nope.yaml")],
        lambda t: f"{t / 'nope.yaml'}: config file not found",
    ),
    Case(
        "config-invalid-yaml",
        "build_index.py",
        lambda t: {"c.yaml": b"corpus: c.jsonl\nbm25: [true\n"},
        lambda t: ["--config", str(t / "c.yaml")],
        lambda t: f"{t / 'c.yaml'}:3: invalid YAML",
    ),
]

EVAL_CONFIG = """name: e
output_dir: {out}
questions: [{{path: {questions}}}]
models:
  backbone: {{backend: transformers, model: "offline:smollm2"}}
  answerer: {{backend: transformers, model: "offline:smollm2"}}
  executor: {{backend: transformers, model: "offline:smollm2"}}
pipeline: {{executor_roles: [executor], driver: executor}}
retriever: {{index: {index}, kind: bm25}}
"""

EVAL_CASES = [
    Case(
        "evaluate-missing-questions",
        "evaluate.py",
        lambda t: {
            "e.yaml": EVAL_CONFIG.format(out=t / "out", questions=t / "q.jsonl", index=t / "idx").encode()
        },
        lambda t: ["--config", str(t / "e.yaml")],
        lambda t: f"{t / 'q.jsonl'}: questions file not found",
    ),
]

CASES = [*FILTER_CASES, *EMPTY_OUTPUT_CASES, *COLLECT_CASES, *SFT_CASES, *CONFIG_CASES, *EVAL_CASES]


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BM25 index of the 5-passage CORPUS, built once and copied into each collect case."""
    root = tmp_path_factory.mktemp("index")
    (root / "c.jsonl").write_bytes(CORPUS)
    proc = run_recipe(
        "build_index.py", "--corpus", str(root / "c.jsonl"), "--output", str(root / "idx"), "--bm25"
    )
    assert proc.returncode == 0, proc.stderr
    return root / "idx"


@pytest.mark.parametrize("case", [launches(c.recipe, c, id=c.name) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if case.recipe == "collect_rollouts.py":
        shutil.copytree(request.getfixturevalue("bm25_index"), tmp_path / "idx")
    files = case.files(tmp_path)
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    proc = run_recipe(case.recipe, *case.args(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert case.names(tmp_path) in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] != []
    for name, data in files.items():
        assert (tmp_path / name).read_bytes() == data, name
    rel = [p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()]
    written = {str(p) for p in rel if p.parts[0] != "idx"}  # idx: the collect cases' copied index
    assert written == set(files), "a failed run leaves no output (nothing that blocks its re-run)"


@pytest.mark.parametrize("recipe", ["filter_trajectories.py", "build_grpo_data.py"])
def test_allow_empty_writes_the_empty_file(tmp_path: Path, recipe: str) -> None:
    (tmp_path / "r.jsonl").write_bytes(_all_wrong(tmp_path))
    out = tmp_path / "out.jsonl"
    proc = run_recipe(
        recipe, "--rollouts", str(tmp_path / "r.jsonl"), "--output", str(out), "--allow_empty", "true"
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == b""


def test_filter_good_rerun_into_same_output(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_bytes(b"")
    assert run_recipe("filter_trajectories.py", *_filter_args(tmp_path)).returncode == 2
    assert not (tmp_path / "sft.jsonl").exists()
    (tmp_path / "r.jsonl").write_bytes(_rollouts(tmp_path))
    proc = run_recipe("filter_trajectories.py", *_filter_args(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sft.jsonl").read_text(encoding="utf-8").count("\n") > 0


def test_filter_no_schema_field_still_loads(tmp_path: Path) -> None:
    data = _rollouts(tmp_path).replace(b'"schema":"executor_sft.episode/v1",', b"")
    assert b'"schema"' not in data.split(b"\n")[0][:40]
    (tmp_path / "r.jsonl").write_bytes(data)
    proc = run_recipe("filter_trajectories.py", *_filter_args(tmp_path))
    assert proc.returncode == 0, proc.stderr


def test_filter_output_mode_follows_umask(tmp_path: Path) -> None:
    from executor_sft.filters import write_jsonl

    old = os.umask(0o022)
    try:
        write_jsonl(tmp_path / "out.jsonl", [{"a": 1}])
    finally:
        os.umask(old)
    assert (tmp_path / "out.jsonl").stat().st_mode & 0o777 == 0o644


def test_collect_good_input_passes_the_checks(tmp_path: Path, bm25_index: Path) -> None:
    """After a rejected resume, the repaired file and config pass every pre-model check."""
    from executor_sft.rollout.config import check_inputs, load_collect_config

    shutil.copytree(bm25_index, tmp_path / "idx")
    for name, data in _collect_files(tmp_path).items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "out").mkdir()
    rollouts = tmp_path / "out" / "rollouts.jsonl"
    rollouts.write_bytes(_head(ROLLOUTS, 1) + b"{torn\n" + _head(ROLLOUTS, 1))
    assert run_recipe("collect_rollouts.py", *_collect_args(tmp_path)).returncode == 2
    rollouts.write_bytes(_head(ROLLOUTS, 2) + b'{"torn last')
    check_inputs(load_collect_config(tmp_path / "cfg.yaml"))
    assert rollouts.read_bytes().endswith(b'{"torn last')


@pytest.mark.slow
def test_sft_good_data_passes_the_check(tmp_path: Path) -> None:
    """The same location with good rows passes the pre-model check; the bad run wrote no model dir."""
    from executor_sft.sft.data import load_sft_rows

    data = tmp_path / "s.jsonl"
    data.write_bytes(_head(SFT_ROWS, 2) + b'{"prompt": "no messages here"}\n')
    assert run_recipe("sft_executor.py", *_sft_args(tmp_path)).returncode == 2
    assert not (tmp_path / "model").exists()
    data.write_bytes(_head(SFT_ROWS, 2))
    load_sft_rows(data)


@pytest.mark.slow
def test_a_typo_near_a_known_key_is_named(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("max_step: 2\n", encoding="utf-8")
    proc = run_recipe("sft_executor.py", "--config", str(tmp_path / "c.yaml"))
    assert proc.returncode == 2 and "did you mean 'max_steps'?" in proc.stderr


def test_build_index_reads_a_yaml_config(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_bytes(CORPUS)
    config = f"corpus: {tmp_path / 'c.jsonl'}\noutput: {tmp_path / 'idx'}\nbm25: true\n"
    (tmp_path / "c.yaml").write_text(config, encoding="utf-8")
    proc = run_recipe("build_index.py", "--config", str(tmp_path / "c.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "idx" / "manifest.json").is_file()

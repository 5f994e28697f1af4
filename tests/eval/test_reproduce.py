"""docs/reproduce.md: its commands, in order, run with scripted models on minibench.

Each command runs as written, plus `--set` overrides that point the paper configs at
minibench (one dev question per dataset), the cached minibench BM25 index and a temporary
output directory. Models are mapped to scripted doubles through the ModelPool factory, the
same mechanism the other evaluation tests use.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys

import pytest
import yaml
from eval_helpers import scripted_factory

from executor_sft.eval import QuestionSource, select_questions
from executor_sft.llm import pool as model_pool
from executor_sft.testing.paths import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]

DOC = REPO_ROOT / "docs" / "reproduce.md"
PAPER = REPO_ROOT / "recipes" / "configs" / "paper"


def doc_commands() -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- reproduce-commands.*?-->\s*```bash\n(.*?)```", text, re.S).group(1)
    return [shlex.split(line) for line in block.splitlines() if line.startswith("python ")]


def _recipe(path: str):
    name = "recipe_" + path.rsplit("/", 1)[-1].removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the recipe loads
    spec.loader.exec_module(module)
    return module


def _policies() -> dict[str, str]:
    """Model label -> scripted policy, from the paper configs themselves."""
    out = {}
    base = yaml.safe_load((PAPER / "eval_base.yaml").read_text())
    out[base["models"]["answerer"]["name"]] = "answerer"
    out[base["models"]["judge"]["name"]] = "judge"
    ref = yaml.safe_load((PAPER / "eval_set.yaml").read_text())
    out[ref["models"]["backbone"]["name"]] = "bb-picky"
    out[ref["models"]["executor"]["name"]] = "ex-quick"
    for path in PAPER.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        for key, policy in (
            ("backbones", "bb-wide"),
            ("executors", "ex-thorough"),
            ("single_agents", "agent"),
        ):
            for m in (data.get(key) or {}).values():
                out[m["name"]] = policy
    return out


def test_doc_commands_run_with_scripted_models(
    tmp_path, monkeypatch, minibench_questions_path, minibench_corpus_path, minibench_bm25_dir, capsys
):
    monkeypatch.chdir(REPO_ROOT)
    commands = doc_commands()
    assert [c[1] for c in commands] == ["recipes/build_index.py", "recipes/build_eval_set.py"] + [
        "recipes/sweep.py"
    ] * 5
    source = {"path": str(minibench_questions_path), "split": "dev", "limit": 1}
    questions = select_questions([QuestionSource(**source)])
    gold = {q.question: q.golden_answers[0] for q in questions}
    policies = _policies()
    built: list[str] = []
    inner = scripted_factory(gold, built)

    def factory(cfg):
        return inner(cfg.model_copy(update={"model": f"scripted:{policies[cfg.label()]}"}))

    monkeypatch.setattr(model_pool, "build_chat_model", factory)  # what every ModelPool builds with
    eval_set = tmp_path / "eval_set" / "eval_set.json"
    data = [f"base.questions.0.{k}={v}" for k, v in source.items()]
    data += [f"base.questions.0.ids_file={eval_set}", f"base.retriever.index={minibench_bm25_dir}"]
    sweeps = []
    for argv in commands:
        script, args = argv[1], argv[2:]
        if script == "recipes/build_index.py":
            module = _recipe(script)
            args = [str(minibench_corpus_path) if a == "$CORPUS" else a for a in args]
            args = [str(minibench_bm25_dir) if a == "indexes/paper" else a for a in args]
            from transformers import HfArgumentParser

            (parsed,) = HfArgumentParser(module.BuildIndexArgs).parse_args_into_dataclasses(args=args)
            module.main(parsed)
            continue
        name = args[args.index("--config") + 1].rsplit("/", 1)[-1].removesuffix(".yaml")
        out = tmp_path / name
        sets = [x for d in data for x in ("--set", d)]
        if script == "recipes/build_eval_set.py":
            out = tmp_path / "eval_set"
            sets = [x for d in data if "ids_file" not in d for x in ("--set", d)]
        else:
            sweeps.append(out)
        code = _recipe(script).main([*args, "--output_dir", str(out), "--no_progress", *sets])
        assert code == 0, capsys.readouterr().err

    saved = json.loads(eval_set.read_text())
    assert saved["ids"] and len(saved["ids"]) + len(saved["excluded"]) == len(questions)
    digests = set()
    for out in sweeps:
        result = json.loads((out / "sweep.json").read_text())
        assert (out / "sweep.md").exists() and (out / "pareto.png").exists()
        for cell in result["cells"]:
            meta = cell["results"]["meta"]
            assert meta["questions"] == len(saved["ids"]) and meta["samples"] == 4
            assert not meta["identical_samples"]
            digests.add(meta["question_ids"])
    assert len(digests) == 1  # every cell of every table scored the one evaluation set
    tab3 = (tmp_path / "tab3_executor_sweep" / "sweep.md").read_text()
    assert all(f"| v4-flash+{e} |" in tab3 for e in ("qwen3-1_7b", "sft", "search-r1", "v4-flash"))

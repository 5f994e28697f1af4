"""docs/reproduce.md: its commands, in order, run with scripted models on minibench.

Each command runs as written, plus `--set` overrides that point the paper configs at
minibench (one dev question per dataset), a temporary output and cells directory, and the
offline stand-in the page documents for step 1 (a BM25 index, `base.retriever.kind=bm25`).
Every "set this" host is set to a real local server, and the API key variable to a dummy key,
as a user fills them in (the preflight refuses placeholders and checks each host answers); the
models themselves are mapped to scripted doubles through the ModelPool factory, the same
mechanism the other evaluation tests use.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml
from eval_helpers import scripted_factory
from script_modules import load_script

from executor_sft.eval import QuestionSource, select_questions
from executor_sft.llm import pool as model_pool
from executor_sft.llm.server import BackgroundServer, create_app
from tests.support.doubles import ScriptedChatModel
from tests.support.paths import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]

DOC = REPO_ROOT / "docs" / "reproduce.md"
PAPER = REPO_ROOT / "recipes" / "configs" / "paper"


def doc_commands() -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- reproduce-commands.*?-->\s*```bash\n(.*?)```", text, re.S).group(1)
    return [shlex.split(line) for line in block.splitlines() if line.startswith("python ")]


def _recipe(path: str):
    return load_script(path)


def _policies() -> dict[str, str]:
    """Model label -> scripted policy, from the paper configs themselves."""
    out = {}
    base = yaml.safe_load((PAPER / "eval_base.yaml").read_text())
    out[base["models"]["answerer"]["name"]] = "answerer"
    out[base["models"]["judge"]["name"]] = "judge"
    for path in PAPER.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        for key in ("backbones", "executors", "single_agents"):
            for m in (data.get(key) or {}).values():
                out[m["name"]] = "both"  # a table's model may fill either role (Tab. 1's diagonal)
        for m in (data.get("no_retrieval") or {}).values():
            out[m["name"]] = "answerer"
    return out


def _stand_in(args: list[str], corpus, index) -> list[str]:
    """Step 1 as the page's offline stand-in: BM25 over the corpus instead of the dense encoder."""
    assert "--dense" in args and "Qwen/Qwen3-Embedding-8B" in args  # the reference build, as written
    out = ["--corpus", str(corpus), "--output", str(index), "--bm25"]
    assert args[args.index("--output") + 1] == "indexes/paper" and "$CORPUS" in args
    return out


def _hosts(config: str, url: str) -> list[str]:
    """`--set` items filling what a sweep config leaves to the user: every model's host (the server
    at `url`) and the served names of the checkpoints a user trains (Tab. 3's SFT and Search-R1)."""
    data = yaml.safe_load((REPO_ROOT / config).read_text())
    sets = []
    for key in ("backbones", "executors", "single_agents", "no_retrieval"):
        for name, model in (data.get(key) or {}).items():
            sets.append(f'{key}.{name}.base_urls=["{url}"]')
            if "SET-THIS" in model["model"]:
                sets.append(f"{key}.{name}.model=served-{name}")
    return sets


def test_doc_commands_run_with_scripted_models(
    tmp_path,
    monkeypatch,
    request,
    minibench_questions_path,
    minibench_corpus_path,
    minibench_bm25_dir,
    capsys,
):
    monkeypatch.chdir(REPO_ROOT)
    commands = doc_commands()
    configs = [c[c.index("--config") + 1].rsplit("/", 1)[-1] for c in commands[1:]]
    assert [c[1] for c in commands] == ["recipes/build_index.py"] + ["recipes/sweep.py"] * 7
    assert configs == [
        "tab1_single_vs_main_sub.yaml",
        "tab2_backbone_sweep.yaml",
        "tab3_executor_sweep.yaml",
        "tab5_executors_x_backbones.yaml",
        "fig2_role_sensitivity.yaml",
        "fig3_pareto.yaml",
        "tab6_no_retrieval.yaml",
    ]
    source = {"path": str(minibench_questions_path), "split": "dev", "limit": 1}
    questions = select_questions([QuestionSource(**source)])
    gold = {q.question: q.golden_answers[0] for q in questions}
    policies = _policies()
    built: list[str] = []
    inner = scripted_factory(gold, built)

    def factory(cfg):
        return inner(cfg.model_copy(update={"model": f"scripted:{policies[cfg.label()]}"}))

    monkeypatch.setattr(model_pool, "build_chat_model", factory)  # what every ModelPool builds with
    index = tmp_path / "index"
    data = [f"base.questions.0.{k}={v}" for k, v in source.items()]
    data += [f"base.retriever.index={index}", "base.retriever.kind=bm25", "base.retriever.options={}"]
    data += [f"cells_dir={tmp_path / 'cells'}"]
    host = BackgroundServer(create_app(ScriptedChatModel(default="unused", name="host"))).start()
    request.addfinalizer(host.stop)
    for path in PAPER.glob("*.yaml"):  # the hosted models' key variables, with keys nobody sends
        for name in re.findall(r"api_key_env:\s*(\w+)", path.read_text()):
            monkeypatch.setenv(name, "not-a-real-key")
    data += [f'base.models.{role}.base_urls=["{host.base_url}"]' for role in ("answerer", "judge")]
    sweeps = {}
    for argv in commands:
        script, args = argv[1], argv[2:]
        if script == "recipes/build_index.py":
            module = _recipe(script)
            from transformers import HfArgumentParser

            stand_in = _stand_in(args, minibench_corpus_path, index)
            (parsed,) = HfArgumentParser(module.BuildIndexArgs).parse_args_into_dataclasses(args=stand_in)
            module.main(parsed)
            continue
        name = args[args.index("--config") + 1].rsplit("/", 1)[-1].removesuffix(".yaml")
        out = tmp_path / name
        sets = [
            x for d in data + _hosts(args[args.index("--config") + 1], host.base_url) for x in ("--set", d)
        ]
        code = _recipe(script).main([*args, "--output_dir", str(out), "--no_progress", *sets])
        assert code == 0, capsys.readouterr().err
        sweeps[name] = json.loads((out / "sweep.json").read_text())
        assert (out / "sweep.md").exists()

    digests = set()
    for result in sweeps.values():
        for cell in result["cells"]:
            meta = cell["results"]["meta"]
            assert meta["questions"] == len(questions) and meta["samples"] == 4
            assert meta["eval_set"] is None  # the questions as given: no second exclusion
            assert not meta["identical_samples"]
            digests.add(meta["question_ids"])
    assert len(digests) == 1  # every cell of every table scored the same questions
    counts = {name: len(result["cells"]) for name, result in sweeps.items()}
    assert counts == {
        "tab1_single_vs_main_sub": 12,
        "tab2_backbone_sweep": 6,
        "tab3_executor_sweep": 8,
        "tab5_executors_x_backbones": 6,
        "fig2_role_sensitivity": 11,
        "fig3_pareto": 8,
        "tab6_no_retrieval": 2,
    }
    # the shared cells directory holds each distinct cell once: Tab. 1's 12, Tab. 2's 5 new (its
    # Qwen3-1.7B row is Tab. 1's), Tab. 3's 6 new (one of Tab. 1, one of Tab. 2), Tab. 5's 3 new
    # (GLM-5.1's), Tab. 6's 2; Fig. 2 and Fig. 3 re-use cells only
    assert len(list((tmp_path / "cells").iterdir())) == 12 + 5 + 6 + 3 + 2
    tab3 = (tmp_path / "tab3_executor_sweep" / "sweep.md").read_text()
    assert all(f"| v4-flash+{e} |" in tab3 for e in ("qwen3-1_7b", "qwen3-1_7b-sft", "qwen3-8b-searchr1"))
    assert "judge 2wikimultihopqa" in tab3  # the paper's per-dataset columns: the judge
    assert (tmp_path / "fig2_role_sensitivity" / "roles.png").stat().st_size > 0
    assert (tmp_path / "fig3_pareto" / "pareto.png").exists()
    tab6 = {c["name"]: c["results"] for c in sweeps["tab6_no_retrieval"]["cells"]}
    assert set(tab6) == {"no-retrieval:deepseek", "no-retrieval:qwen3-32b"}
    for results in tab6.values():
        assert results["meta"]["mode"] == "no_retrieval"
        assert results["average"]["no_subquery_share"] == 1.0  # the answerer alone: no executor ran

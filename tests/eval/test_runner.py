"""run_eval with scripted doubles over real BM25: outputs, resume, refusal to mix systems, failures."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from eval_helpers import scripted, scripted_factory

from executor_sft.eval import (
    EvalConfig,
    QuestionSource,
    load_eval_config,
    run_eval,
    select_questions,
)
from executor_sft.eval.runner import system_record
from executor_sft.llm import ModelPool
from executor_sft.store import SystemChangedError


@pytest.fixture(scope="module")
def dev_questions(minibench_questions_path):
    return select_questions([QuestionSource(path=str(minibench_questions_path), split="dev", limit=1)])


def _config(tmp_path, questions_path, index_dir, **overrides) -> EvalConfig:
    data = {
        "name": "scripted",
        "output_dir": str(tmp_path / "out"),
        "questions": [{"path": str(questions_path), "split": "dev", "limit": 1}],
        "samples": 2,
        "concurrency": 3,
        "models": {
            "backbone": scripted("bb-wide"),
            "answerer": scripted("answerer"),
            "executor": scripted("ex-thorough"),
            "judge": scripted("judge"),
        },
        "pipeline": {"executor_roles": ["executor"], "driver": "executor", "max_turns": 3},
        "retriever": {"index": str(index_dir), "k": 3},
        "metrics": {"bucket_tokens": 2000, "n_buckets": 4},
    }
    data.update(overrides)
    return EvalConfig.model_validate(data)


def test_select_questions(minibench_questions_path, dev_questions):
    assert [q.dataset for q in dev_questions] == ["hotpotqa", "musique", "2wikimultihopqa"]
    assert all(q.split == "dev" for q in dev_questions)
    two = select_questions(
        [QuestionSource(path=str(minibench_questions_path), split="train", datasets=["musique"], limit=2)]
    )
    assert [q.dataset for q in two] == ["musique", "musique"]
    with pytest.raises(ValueError, match="no questions left"):
        select_questions([QuestionSource(path=str(minibench_questions_path), datasets=["nope"])])


@pytest.mark.slow
def test_run_eval_writes_results_and_resumes(
    tmp_path, minibench_questions_path, minibench_bm25_dir, minibench_bm25, dev_questions
):
    gold = {q.question: q.golden_answers[0] for q in dev_questions}
    built: list[str] = []
    cfg = _config(tmp_path, minibench_questions_path, minibench_bm25_dir)
    run = run_eval(
        cfg, pool=ModelPool(scripted_factory(gold, built)), retriever=minibench_bm25, progress=False
    )
    assert (run.ran, run.skipped, run.failed) == (6, 0, [])
    lines = (cfg.out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 6
    r = run.results
    assert set(r.datasets) == {"hotpotqa", "musique", "2wikimultihopqa"}
    # The thorough executor searches twice and reports the gold answer; the answerer relays it.
    assert r.average["em"] == 1.0 and r.average["judge"] == 1.0
    assert r.average["search_2plus"] == 1.0 and r.average["no_subquery_share"] == 0.0
    hot = r.datasets["hotpotqa"]
    assert hot.em.k == 2 and hot.searches["invocations"] == 4  # 2 samples x 2 sub-queries
    episodes = [json.loads(line) for line in lines]
    expected = (
        sum(
            run_["usage"]["prompt_tokens"] + run_["usage"]["completion_tokens"]
            for e in episodes
            if e["question"]["dataset"] == "hotpotqa"
            for run_ in e["runs"]
        )
        / 2
    )
    assert hot.subagent_tokens.mean == pytest.approx(expected)
    assert hot.cer_c is not None and 0.0 <= hot.cer_c.mean <= 1.0
    for name in ("results.json", "results.md", "summary.png", "judge_cache.jsonl"):
        assert (cfg.out / name).stat().st_size > 0
    assert "| hotpotqa | 1 | 2 | 100.0 ± 0.0 |" in (cfg.out / "results.md").read_text()

    # Kill simulation: drop the last record and leave half of it; a rerun redoes only that one.
    with (cfg.out / "episodes.jsonl").open("w") as fh:
        fh.write("\n".join(lines[:5]) + "\n" + lines[5][:40])
    built.clear()
    again = run_eval(
        cfg, pool=ModelPool(scripted_factory(gold, built)), retriever=minibench_bm25, progress=False
    )
    assert (again.ran, again.skipped) == (1, 5)
    ids = [json.loads(x)["episode_id"] for x in (cfg.out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(json.loads(x)["episode_id"] for x in lines)
    # Finished: nothing to run, no model built.
    built.clear()
    done = run_eval(
        cfg, pool=ModelPool(scripted_factory(gold, built)), retriever=minibench_bm25, progress=False
    )
    assert (done.ran, done.skipped, built) == (0, 6, [])
    assert done.results.average == pytest.approx(again.results.average)


class _Down:
    name = "down"

    async def chat(self, messages, tools=None, sampling=None):
        raise ConnectionError("endpoint down")


def test_refuses_to_mix_systems_and_reports_failures(
    tmp_path, minibench_questions_path, minibench_bm25_dir, minibench_bm25
):
    cfg = _config(tmp_path, minibench_questions_path, minibench_bm25_dir, samples=1)
    # Every endpoint down makes every episode raise: reported, not stored.
    models = {role: _Down() for role in cfg.models}
    run = run_eval(cfg, models=models, retriever=minibench_bm25, progress=False)
    assert len(run.failed) == 3 and run.ran == 0
    assert not (cfg.out / "episodes.jsonl").exists() or (cfg.out / "episodes.jsonl").read_text() == ""
    first = run_eval(cfg, pool=ModelPool(scripted_factory({}, [])), retriever=minibench_bm25, progress=False)
    assert (first.ran, first.failed) == (3, [])
    other = _config(
        tmp_path,
        minibench_questions_path,
        minibench_bm25_dir,
        samples=1,
        models={**{k: v.model_dump() for k, v in cfg.models.items()}, "executor": scripted("ex-quick")},
    )
    with pytest.raises(
        SystemChangedError, match=r'different system \(changed: models\.executor\.model: "scripted:ex-'
    ):
        run_eval(other, models=models, retriever=minibench_bm25, progress=False)
    accepted = other.model_copy(update={"accept_system_change": True})
    again = run_eval(accepted, models=models, retriever=minibench_bm25, progress=False)
    assert (again.ran, again.skipped) == (0, 3)
    record = json.loads((cfg.out / "episodes.system.json").read_text())
    assert record["system"] == system_record(other)
    assert record["accepted_changes"][0]["changed"][0].startswith("models.executor.model: ")


def test_a_run_that_fails_on_its_inputs_leaves_nothing_that_refuses_its_corrected_rerun(
    tmp_path, minibench_questions_path, minibench_bm25_dir, minibench_bm25, dev_questions
):
    """A wrong questions path fails before any episode: no identity record, so the fixed run (whose
    models changed too, as when every shared-data path of a config is corrected) is not refused."""
    from executor_sft.errors import UserError

    gold = {q.question: q.golden_answers[0] for q in dev_questions}
    wrong = _config(tmp_path, tmp_path / "no-such-questions.jsonl", minibench_bm25_dir, samples=1)
    with pytest.raises(UserError, match="no-such-questions.jsonl: questions file not found"):
        run_eval(wrong, pool=ModelPool(scripted_factory(gold, [])), retriever=minibench_bm25, progress=False)
    assert not (wrong.out / "episodes.system.json").exists()
    fixed = _config(
        tmp_path,
        minibench_questions_path,
        minibench_bm25_dir,
        samples=1,
        models={**{k: v.model_dump() for k, v in wrong.models.items()}, "executor": scripted("ex-quick")},
    )
    run = run_eval(
        fixed, pool=ModelPool(scripted_factory(gold, [])), retriever=minibench_bm25, progress=False
    )
    assert (run.ran, run.failed) == (3, [])
    record = json.loads((fixed.out / "episodes.system.json").read_text())["system"]
    assert record["models"]["executor"]["model"] == (scripted("ex-quick")["model"])


def test_episodes_are_fsynced_off_the_event_loop(
    tmp_path, monkeypatch, minibench_questions_path, minibench_bm25_dir, minibench_bm25, dev_questions
):
    """An fsync takes milliseconds; on the event loop it would stall every episode in flight."""
    gold = {q.question: q.golden_answers[0] for q in dev_questions}
    cfg = _config(tmp_path, minibench_questions_path, minibench_bm25_dir, samples=2)
    fsync = os.fsync
    calls: list[tuple[int, bool]] = []

    def recording_fsync(fd: int) -> None:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        calls.append((os.fstat(fd).st_ino, on_loop))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    run = run_eval(cfg, pool=ModelPool(scripted_factory(gold, [])), retriever=minibench_bm25, progress=False)
    assert (run.ran, run.failed) == (6, [])
    episodes = (cfg.out / "episodes.jsonl").stat().st_ino
    store_calls = [on_loop for inode, on_loop in calls if inode == episodes]
    assert store_calls and not any(store_calls)


def test_config_errors_name_the_field(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text(
        "output_dir: x\nquestions: [{path: q.jsonl}]\nretriever: {index: i}\nmodels: {backbone: {model: m}}\nsampels: 3\n"
    )
    with pytest.raises(ValueError) as err:
        load_eval_config(path)
    assert "eval.yaml" in str(err.value) and "field 'sampels'" in str(err.value)
    path.write_text(
        "output_dir: x\nquestions: [{path: q.jsonl}]\nretriever: {index: i}\nmodels: {backbone: {model: m}}\n"
    )
    with pytest.raises(ValueError, match=r"no model for role\(s\) \['answerer', 'executor'\]"):
        load_eval_config(path)


def test_how_a_model_is_reached_is_not_part_of_the_evaluated_system(
    tmp_path, minibench_questions_path, minibench_bm25_dir
):
    """Endpoints, timeouts and routing options (as collection's identity) do not make a resumed
    evaluation "a different system"; the model name does."""
    cfg = _config(tmp_path, minibench_questions_path, minibench_bm25_dir)

    def with_executor(**executor):
        models = {k: v.model_dump() for k, v in cfg.models.items()}
        models["executor"] = {"backend": "openai", "model": "Qwen/Qwen3-1.7B", **executor}
        return system_record(
            cfg.model_copy(
                update={"models": EvalConfig.model_validate({**cfg.model_dump(), "models": models}).models}
            )
        )

    base = with_executor(base_urls=["http://127.0.0.1:8000/v1"])
    moved = with_executor(
        base_urls=["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"], timeout_s=5, health_check_s=2.0
    )
    assert moved == base
    assert with_executor(base_urls=["http://127.0.0.1:8000/v1"], model="Qwen/Qwen3-8B") != base


def test_the_judge_model_is_part_of_the_system(tmp_path, minibench_questions_path, minibench_bm25_dir):
    """The judge's verdicts are stored with the episodes, so another judge is another system."""
    cfg = _config(tmp_path, minibench_questions_path, minibench_bm25_dir)

    def with_judge(name: str) -> dict:
        models = {k: v.model_dump() for k, v in cfg.models.items()}
        models["judge"] = scripted(name)
        return system_record(EvalConfig.model_validate({**cfg.model_dump(), "models": models}))

    assert with_judge("judge") == system_record(cfg)
    assert with_judge("judge-strict")["models"]["judge"]["model"] == "scripted:judge-strict"
    assert with_judge("judge-strict") != system_record(cfg)

"""collection.mode (shadow | separate) and pipeline.outcome.mode (substitute | replay) through `collect`."""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from collections import Counter

from executor_sft.filters import FilterConfig, filter_episodes
from executor_sft.rollout import CollectConfig, collect, render_summary
from executor_sft.store import read_episodes
from executor_sft.synthetic import (
    ScriptedAnswerer,
    ScriptedBackbone,
    ScriptedJudge,
    ScriptedTeacherExecutor,
    scripted_student_executor,
)


def make_config(world_dir, out, **kwargs) -> CollectConfig:
    data = {
        "questions": {"path": str(world_dir / "questions.jsonl"), "limit": 12},
        "retriever": {"index": "unused-a-retriever-is-passed"},
        "output_dir": str(out),
        "concurrency": 8,
    }
    data.update(kwargs)
    return CollectConfig.model_validate(data)


class GivesUpSometimes:
    """The scripted student, but on a fixed third of the sub-queries it reports "unknown" (and
    the scripted backbone stops there): its own episodes get fewer invocations than the teacher's."""

    def __init__(self, inner):
        self.inner, self.name = inner, "student-gives-up"

    async def chat(self, messages, tools=None, sampling=None):
        result = await self.inner.chat(messages, tools, sampling)
        content = result.message.get("content") or ""
        if "<answer>" in content and zlib.crc32(messages[1]["content"].encode()) % 3 == 0:
            result.message["content"] = re.sub(r"<answer>.*?</answer>", "<answer>unknown</answer>", content)
        return result


def noisy_models(world):
    return {
        "backbone": ScriptedBackbone(world),
        "answerer": ScriptedAnswerer(world),
        "judge": ScriptedJudge(),
        "teacher": ScriptedTeacherExecutor(world, noise=0.1, extra_search_rate=0.3, seed=3),
        "student": GivesUpSometimes(scripted_student_executor(world, noise=0.2, seed=4)),
    }


def run(config, world, bm25):
    return asyncio.run(collect(config, models=noisy_models(world), retriever=bm25, show_progress=False))


def test_separate_mode_each_role_drives_its_own_episodes(world, world_dir, world_bm25, tmp_path):
    config = make_config(world_dir, tmp_path, collection={"mode": "separate"})
    result = run(config, world, world_bm25)
    episodes = list(read_episodes(result.path))
    questions = {e["question"]["id"] for e in episodes}
    assert len(questions) == 12 and len(episodes) == 24 and result.written == 24
    assert {e["episode_id"] for e in episodes} == {
        f"{q}#0@{d}" for q in questions for d in ("teacher", "student")
    }
    subqueries = {}
    for e in episodes:
        driver = e["driver"]
        assert e["episode_id"].endswith(f"@{driver}") and e["config"]["driver"] == driver
        assert e["config"]["executor_roles"] == [driver]
        own = [r for r in e["runs"] if r["counterfactual_of"] is None]
        assert {r["role"] for r in own} <= {driver}
        # a run's correctness is its own episode's final answer: no substitution call
        for r in own:
            assert r["outcome"]["answer"] == e["answer"] and r["outcome"]["em"] == e["metrics"]["em"]
        # counterfactual budget-1 re-runs only on the teacher's episodes, as before
        cfs = [r for r in e["runs"] if r["counterfactual_of"] is not None]
        assert not cfs or driver == "teacher"
        assert all(r["role"] == "teacher_budget1" and r["run_id"].startswith(e["episode_id"]) for r in cfs)
        assert "answerer_outcomes" not in e["usage"] or cfs
        subqueries[e["episode_id"]] = [q for rnd in e["rounds"] for q in rnd["sub_queries"]]
    # the student's wrong reports shape the backbone's later rounds: different sub-queries
    differ = [q for q in questions if subqueries[f"{q}#0@teacher"] != subqueries[f"{q}#0@student"]]
    assert differ

    s = result.summary
    tab4 = s["executor_invocations"]
    assert set(tab4) == {"teacher", "student"}  # counterfactual re-runs are not invocations
    for role in ("teacher", "student"):
        runs = [r for e in episodes for r in e["runs"] if r["role"] == role]
        assert tab4[role]["invocations"] == len(runs) == s["roles"][role]["runs"]
        assert tab4[role]["searches"] == sum(r["n_searches"] for r in runs)
        assert tab4[role]["share_1_search"] == sum(r["n_searches"] == 1 for r in runs) / len(runs)
        assert tab4[role]["share_2plus_searches"] == sum(r["n_searches"] >= 2 for r in runs) / len(runs)
    assert tab4["teacher"]["invocations"] != tab4["student"]["invocations"]
    assert tab4["teacher"]["share_2plus_searches"] > 0 == tab4["student"]["share_2plus_searches"]
    assert s["episodes_per_driver"] == {"student": 12, "teacher": 12}
    on_disk = json.loads(result.path.with_name("rollouts.summary.json").read_text())
    assert on_disk["executor_invocations"] == tab4
    table = render_summary(s)
    assert "Tab. 4" in table and "searches/invocation" in table
    assert f"{tab4['teacher']['searches_per_invocation']:.2f}" in table

    # the filter's "uncovered" rule is per episode: a teacher episode has no student runs, so every
    # teacher sub-query counts as uncovered (docs/rollout.md, "Collection and outcome modes")
    rows = filter_episodes(episodes, FilterConfig(require_judge=False)).rows
    roles = Counter((r["stratum"], r["source_run_id"].rsplit("/", 1)[-1]) for r in rows)
    assert roles[("single_search", "teacher")] and roles[("single_search", "student")]


def test_separate_mode_resumes_without_duplicates(world, world_dir, world_bm25, tmp_path):
    half = make_config(
        world_dir,
        tmp_path,
        collection={"mode": "separate"},
        questions={"path": str(world_dir / "questions.jsonl"), "limit": 6},
    )
    first = run(half, world, world_bm25)
    assert first.written == 12 and first.skipped == 0
    # a kill after some episodes: drop the last three records, as if they were never written
    lines = first.path.read_text().splitlines(keepends=True)
    first.path.write_text("".join(lines[:-3]))
    full = make_config(world_dir, tmp_path, collection={"mode": "separate"})
    second = run(full, world, world_bm25)
    assert second.written == 24 - 9 and second.skipped == 9
    third = run(full, world, world_bm25)
    assert third.written == 0 and third.skipped == 24
    ids = [e["episode_id"] for e in read_episodes(full.rollouts_path)]
    assert len(ids) == len(set(ids)) == 24
    assert third.summary["episodes"] == 24 and third.summary["episodes_per_driver"] == {
        "student": 12,
        "teacher": 12,
    }


def test_shadow_mode_keeps_its_ids_and_replay_labels_shadows_and_counterfactuals(
    world, world_dir, world_bm25, tmp_path
):
    config = make_config(world_dir, tmp_path, pipeline={"outcome": {"mode": "replay"}})
    result = run(config, world, world_bm25)
    episodes = list(read_episodes(result.path))
    assert {e["episode_id"] for e in episodes} == {f"{e['question']['id']}#0" for e in episodes}
    assert all("driver" not in e for e in episodes)
    assert all(e["config"]["outcome"] == {"mode": "replay"} for e in episodes)
    modes = Counter()
    for e in episodes:
        for r in e["runs"]:
            if r["role"] == "teacher":
                assert "mode" not in r["outcome"]  # the driver's own answer
                continue
            outcome = r["outcome"]
            if outcome.get("substituted") is False:
                continue  # same report as the driver's: the episode's outcome, no call
            assert outcome["mode"] == "replay" and outcome["replay"]["from_round"] == r["round"]
            assert all(x["role"] == "teacher" for x in outcome["replay"]["runs"])
            modes[r["role"]] += 1
    assert modes["student"] and modes["teacher_budget1"], modes
    # replay calls are counted apart from the pipeline's own
    usage = Counter()
    for e in episodes:
        for key in ("backbone_replay", "executor_replay", "answerer_outcomes"):
            usage[key] += e["usage"].get(key, {}).get("calls", 0)
    assert usage["backbone_replay"] >= sum(modes.values()) and usage["answerer_outcomes"] == sum(
        modes.values()
    )
    assert result.summary["roles"]["backbone_replay"]["calls"] == usage["backbone_replay"]
    # resume: nothing is run twice
    again = run(config, world, world_bm25)
    assert again.written == 0 and again.skipped == 12

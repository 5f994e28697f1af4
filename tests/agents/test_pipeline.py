"""Pipeline: backbone rounds, shadow runs, driver reports, answerer isolation, substitution."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from agent_helpers import PASSAGE_TEXTS, QUESTION, ToyRetriever, report, search_call

from executor_sft.agents import (
    PipelineConfig,
    RoleConfig,
    answer_with_replay,
    answer_with_substitution,
    episode_config_record,
    run_counterfactual,
    run_episode,
)
from executor_sft.llm.base import ChatError, SamplingParams
from executor_sft.metrics.judge import LLMJudge
from executor_sft.schema import Episode, Question, Report
from tests.support.doubles import ScriptedChatModel, assistant

CHAIN = {
    "Who founded Velmora?": "Ada Krell",
    "Where was Ada Krell born?": "Tarsin",
    "Which province is Tarsin the capital of?": "Eldmark",
}


def executor(answers: dict[str, str], n_searches: int = 1, name: str = "exec", latency_s: float = 0.0):
    """Searches the sub-query n times, then reports the answer this role 'believes'."""

    def policy(messages, tools):
        done = sum(m["role"] == "tool" for m in messages)
        if tools and done < n_searches:
            return search_call(messages[1]["content"])
        return report(answers.get(messages[1]["content"], "unknown"), f"evidence by {name}")

    return ScriptedChatModel(default=policy, name=name, latency_s=latency_s)


def last_report_answerer():
    """Answers with the last report's answer in its input: substitution position matters."""

    def policy(messages, tools):
        answers = re.findall(r"<answer>(.*?)</answer>", messages[-1]["content"])
        return f"<answer>{answers[-1] if answers else 'no idea'}</answer>"

    return ScriptedChatModel(default=policy, name="answerer")


def chain_backbone(extra: list | None = None):
    plan = assistant(
        content="PLAN-XYZ first the founder. <subquery>Who founded Velmora?</subquery>",
        reasoning="SECRET-THOUGHT",
    )
    return ScriptedChatModel(
        [
            plan,
            "<subquery>Where was Ada Krell born?</subquery>",
            "<subquery>Which province is Tarsin the capital of?</subquery>",
            *(extra or ["<stop/>"]),
        ],
        name="backbone",
    )


def models(**overrides):
    student_answers = {**CHAIN, "Which province is Tarsin the capital of?": "Salt Mines"}
    base = {
        "backbone": chain_backbone(),
        "answerer": last_report_answerer(),
        "teacher": executor(CHAIN, n_searches=2, name="teacher"),
        "student": executor(student_answers, n_searches=1, name="student"),
    }
    return base | overrides


async def test_full_chain_with_shadow_runs_and_driver():
    ms = models()
    ep = await run_episode(QUESTION, ms, ToyRetriever(), PipelineConfig(), sample_index=2)
    assert ep.episode_id == "q-velmora#2" and ep.sample_index == 2
    assert ep.stop_reason == "stopped" and ep.error is None
    assert [r.sub_queries for r in ep.rounds] == [[q] for q in CHAIN] + [[]]
    assert ep.answer == "Eldmark" and ep.metrics.em == 1.0 and ep.metrics.f1 == 1.0
    assert ep.metrics.judge is None  # no judge configured
    # Every sub-query executed by both roles, with stable unique run ids.
    assert len(ep.runs) == 6
    ids = [r.run_id for r in ep.runs]
    assert len(set(ids)) == 6
    assert "q-velmora#2/r2/q0/student" in ids
    teacher, student = ep.runs_for("teacher"), ep.runs_for("student")
    assert [r.n_searches for r in teacher] == [2, 2, 2] and [r.n_searches for r in student] == [1, 1, 1]
    # The backbone sees the driver's (teacher's) reports, never the shadow's.
    round3_request = ms["backbone"].requests[2]["messages"][-1]["content"]
    assert "<answer>Tarsin</answer>" in round3_request and "evidence by teacher" in round3_request
    assert "evidence by student" not in str(ms["backbone"].requests)
    # Outcomes: driver = episode answer; shadow = answer with its report substituted.
    assert all(r.outcome.answer == "Eldmark" and r.outcome.em == 1.0 for r in teacher)
    assert [r.outcome.answer for r in student] == ["Eldmark", "Eldmark", "Salt Mines"]
    assert student[2].outcome.em == 0.0
    # Usage per role is the sum over that role's runs.
    assert ep.usage["student"].calls == sum(r.usage.calls for r in student) == 6
    assert ep.usage["teacher"].calls == 9
    assert ep.usage["backbone"].calls == 4 and ep.usage["answerer"].calls == 1
    assert ep.config["models"]["student"] == "student" and ep.config["driver"] == "teacher"


async def test_answerer_sees_only_question_subqueries_and_reports():
    ms = models()
    ep = await run_episode(QUESTION, ms, ToyRetriever(), PipelineConfig(executor_roles=["teacher"]))
    (request,) = ms["answerer"].requests
    text = "\n".join(m["content"] for m in request["messages"])
    assert request["tools"] is None
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert QUESTION.question in text
    for sub_query, answer in CHAIN.items():
        assert sub_query in text and f"<answer>{answer}</answer>" in text
    assert not any(p in text for p in PASSAGE_TEXTS), "raw passages leaked into the answerer"
    assert "Doc 1" not in text
    assert "PLAN-XYZ" not in text and "SECRET-THOUGHT" not in text, "backbone reasoning leaked"
    assert ep.answerer.response["content"] == "<answer>Eldmark</answer>"


async def test_three_parallel_subqueries_run_concurrently_and_extra_dropped():
    qs = [f"<subquery>{q}</subquery>" for q in CHAIN] + ["<subquery>Is Orrin Vale a painter?</subquery>"]
    ms = models(
        backbone=ScriptedChatModel(["\n".join(qs), "<stop/>"], name="backbone"),
        teacher=executor(CHAIN, n_searches=1, name="teacher", latency_s=0.25),
        student=executor(CHAIN, n_searches=1, name="student", latency_s=0.25),
    )
    start = time.perf_counter()
    ep = await run_episode(QUESTION, ms, ToyRetriever(), PipelineConfig(max_parallel=3))
    elapsed = time.perf_counter() - start
    (rnd, stop) = ep.rounds
    assert rnd.sub_queries == list(CHAIN) and rnd.dropped_sub_queries == 1
    assert stop.sub_queries == [] and ep.stop_reason == "stopped"
    assert len(ep.runs) == 6
    assert {(r.sub_query_index, r.role) for r in ep.runs} == {
        (i, role) for i in range(3) for role in ("teacher", "student")
    }
    # 6 runs x 2 calls x 0.25 s would take 3 s sequentially.
    assert elapsed < 1.5, f"executor runs were not concurrent ({elapsed:.2f}s)"
    # The backbone saw all three driver reports in order.
    feedback = ms["backbone"].requests[1]["messages"][-1]["content"]
    positions = [feedback.index(f"<answer>{a}</answer>") for a in CHAIN.values()]
    assert positions == sorted(positions)


async def test_one_subquery_then_stop():
    ms = models(backbone=ScriptedChatModel(["<subquery>Who founded Velmora?</subquery>", "Enough. <stop/>"]))
    ep = await run_episode(QUESTION, ms, ToyRetriever())
    assert ep.stop_reason == "stopped" and len(ep.rounds) == 2 and len(ep.runs) == 2
    assert ep.answer == "Ada Krell" and ep.metrics.em == 0.0


async def test_backbone_stops_immediately():
    ms = models(backbone=ScriptedChatModel(["<stop/>"]))
    ep = await run_episode(QUESTION, ms, ToyRetriever())
    assert ep.runs == [] and ep.stop_reason == "stopped"
    assert len(ms["answerer"].requests) == 1
    assert "none" in ms["answerer"].requests[0]["messages"][-1]["content"]
    assert ep.answer == "no idea"


async def test_round_budget():
    always = ScriptedChatModel(default="<subquery>Who founded Velmora?</subquery>", name="backbone")
    ms = models(backbone=always)
    ep = await run_episode(QUESTION, ms, ToyRetriever(), PipelineConfig(max_rounds=2))
    assert ep.stop_reason == "round_budget"
    assert len(ep.rounds) == 2 and len(always.requests) == 2
    assert len(ep.runs) == 4
    # No feedback message after the last round (nobody would read it).
    assert always.requests[1]["messages"][-1]["content"].startswith("Reports from round 1")


class Down:
    """An endpoint that is down past its retries."""

    name = "down"

    def __init__(self, message: str):
        self.message = message

    async def chat(self, messages, tools=None, sampling=None):
        raise ChatError(self.message)


async def test_backbone_outage_raises_and_skips_answerer():
    """A failure is not a result: the episode raises (the runner retries it), it is not an error episode."""
    ms = models(backbone=Down("connection refused"))
    with pytest.raises(ChatError, match="connection refused"):
        await run_episode(QUESTION, ms, ToyRetriever())
    assert ms["answerer"].requests == []


@pytest.mark.parametrize("label_outcomes", [False, True])
async def test_answerer_outage_raises(label_outcomes):
    ms = models(answerer=Down("answerer endpoint 500"))
    with pytest.raises(ChatError, match="answerer endpoint 500"):
        await run_episode(QUESTION, ms, ToyRetriever(), PipelineConfig(label_outcomes=label_outcomes))


async def test_an_executor_outage_cancels_the_rounds_other_runs():
    """One role's endpoint down: the episode raises and the other roles' calls in flight are cancelled."""
    cancelled = []

    class Slow:
        name = "slow"

        async def chat(self, messages, tools=None, sampling=None):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

    ms = models(teacher=Slow(), student=Down("student endpoint down"))
    with pytest.raises(ChatError, match="student endpoint down"):
        await asyncio.wait_for(run_episode(QUESTION, ms, ToyRetriever()), timeout=10)
    assert cancelled


async def test_answer_substitution_replaces_only_that_position():
    ms = models()
    config = PipelineConfig(label_outcomes=False)
    ep = await run_episode(QUESTION, ms, ToyRetriever(), config)
    assert all(r.outcome is None for r in ep.runs_for("student"))
    n_before = len(ms["answerer"].requests)
    # Driver run: the episode's answer, no extra call.
    out = await answer_with_substitution(ep, ep.runs_for("teacher")[1], ms["answerer"])
    assert out.answer == ep.answer and len(ms["answerer"].requests) == n_before
    # Shadow run at the last position: answerer re-run with only that report swapped.
    shadow = ep.runs_for("student")[2]
    out = await answer_with_substitution(ep, shadow, ms["answerer"])
    assert out.answer == "Salt Mines" and out.em == 0.0 and out.substituted
    text = ms["answerer"].requests[-1]["messages"][-1]["content"]
    assert "<answer>Ada Krell</answer>" in text and "<answer>Tarsin</answer>" in text
    assert "<answer>Salt Mines</answer>" in text and "<answer>Eldmark</answer>" not in text
    assert text.index("Ada Krell") < text.index("Tarsin") < text.index("Salt Mines")
    # Works from a round-tripped record too (config read back from episode.config).
    reloaded = Episode.model_validate_json(ep.to_json())
    again = await answer_with_substitution(reloaded, reloaded.runs_for("student")[2], ms["answerer"])
    assert again.answer == "Salt Mines"


async def test_substitution_of_failed_run_shows_no_report():
    ms = models(student=ScriptedChatModel(default="no tags at all", name="student"))
    ep = await run_episode(QUESTION, ms, ToyRetriever())
    student = ep.runs_for("student")
    assert all(r.finish == "invalid" and r.report is None for r in student)
    assert "(no report" in ms["answerer"].requests[-1]["messages"][-1]["content"]
    # The last report is missing, so this answerer falls back to the previous one.
    assert student[2].outcome.answer == "Tarsin" and student[2].outcome.em == 0.0


async def test_counterfactual_budget1_run():
    ms = models()
    ep = await run_episode(QUESTION, ms, ToyRetriever())
    original = ep.runs_for("teacher")[1]
    assert original.n_searches == 2
    cf = await run_counterfactual(ep, original, ms["teacher"], ToyRetriever(), ms["answerer"])
    assert cf.role == "teacher_budget1" and cf.counterfactual_of == original.run_id
    assert cf.run_id == "q-velmora#0/r1/q1/teacher_budget1".replace("q1", "q0")
    assert cf.max_searches == 1 and cf.n_searches == 1 and cf.finish == "report"
    assert cf.outcome is not None and cf.outcome.answer == "Eldmark"


async def test_per_role_protocol_sampling_and_budgets():
    config = PipelineConfig(
        max_turns=4,
        roles={
            "student": RoleConfig(
                protocol="tag", sampling=SamplingParams(temperature=0.6, enable_thinking=True)
            ),
            "teacher": RoleConfig(max_turns=2),
            "backbone": RoleConfig(sampling=SamplingParams(max_tokens=77)),
        },
    )

    def tag_student(messages, tools):
        if not any(m["content"].startswith("<information>") for m in messages if m["role"] == "user"):
            return f"<search>{messages[1]['content']}</search>"
        return report("Ada Krell")

    ms = models(
        backbone=ScriptedChatModel(["<subquery>Who founded Velmora?</subquery>", "<stop/>"]),
        student=ScriptedChatModel(default=tag_student, name="student"),
    )
    ep = await run_episode(QUESTION, ms, ToyRetriever(), config)
    student, teacher = ep.runs_for("student")[0], ep.runs_for("teacher")[0]
    assert student.protocol == "tag" and student.finish == "report" and student.max_turns == 4
    assert ms["student"].requests[0]["sampling"].enable_thinking is True
    assert ms["student"].requests[0]["tools"] is None
    assert teacher.max_turns == 2 and teacher.max_searches == 1
    assert ms["backbone"].requests[0]["sampling"].max_tokens == 77
    assert "3" in ms["backbone"].requests[0]["messages"][0]["content"]  # P rendered into the prompt


def test_config_validation():
    with pytest.raises(ValueError, match="driver"):
        PipelineConfig(executor_roles=["student"], driver="teacher")
    with pytest.raises(ValueError, match="max_searches"):
        PipelineConfig(roles={"student": RoleConfig(max_turns=2, max_searches=2)})
    with pytest.raises(ValueError, match="reserved"):
        PipelineConfig(executor_roles=["teacher", "answerer"])
    with pytest.raises(ValueError, match="extra"):
        PipelineConfig.model_validate({"max_round": 3})


async def test_episode_round_trips():
    ep = await run_episode(QUESTION, models(), ToyRetriever())
    data = ep.to_dict()
    assert data["schema"] == "executor_sft.episode/v1"
    back = Episode.model_validate_json(ep.to_json())
    assert back.to_dict() == data
    run = data["runs"][0]
    assert {"calls", "protocol", "n_corrections", "error"} <= set(run)
    assert run["calls"][0]["messages"][0]["role"] == "system"


async def test_judge_scores_episode_and_outcomes():
    judge = LLMJudge(
        ScriptedChatModel(
            default=lambda m, t: (
                "True" if "Eldmark" in m[0]["content"].split("Predicted answer:")[1] else "False"
            )
        )
    )
    ep = await run_episode(QUESTION, models(), ToyRetriever(), judge=judge)
    assert ep.metrics.judge is True and ep.config["judge_model"] == "scripted"
    student = ep.runs_for("student")
    assert [r.outcome.judge for r in student] == [True, True, False]
    assert all(r.outcome.judge is True for r in ep.runs_for("teacher"))


def test_executor_settings_resolve_role_over_pipeline_and_role_stays_fresh():
    sampling = SamplingParams(temperature=0.7)
    config = PipelineConfig(
        max_turns=4, roles={"student": RoleConfig(protocol="tag", top_k=5, max_searches=1, sampling=sampling)}
    )
    student, teacher = config.executor_settings("student"), config.executor_settings("teacher")
    assert (student.protocol, student.top_k, student.max_turns, student.searches) == ("tag", 5, 4, 1)
    assert student.sampling is sampling and student.prompts is config.prompts
    assert (teacher.protocol, teacher.top_k, teacher.searches, teacher.sampling) == (
        "native",
        config.top_k,
        3,
        None,
    )
    assert config.sampling_for("student") is sampling and config.sampling_for("teacher") is None
    # role() still hands out a new object for a role without settings (mutating it changes nothing).
    config.role("teacher").protocol = "tag"
    assert (
        config.role("teacher").protocol == "native"
        and config.executor_settings("teacher").protocol == "native"
    )


async def test_precomputed_config_record_gives_the_same_episode():
    """What the collection engine does (one record per collection) equals the per-episode dump."""
    config, retriever = PipelineConfig(), ToyRetriever()
    ms = models()
    record = episode_config_record(config, ms, retriever, None)
    shared = await run_episode(QUESTION, ms, retriever, config, config_record=record)
    fresh = await run_episode(QUESTION, models(), retriever, config)
    assert shared.config == fresh.config == record
    assert shared.config is not record  # the episode holds its own top-level dict
    shared.config["extra_key"] = 1
    assert "extra_key" not in record


async def test_backend_usage_carrying_calls_does_not_fail_the_episode():
    """Some backends report `calls` in usage; labelling shadow outcomes used to pass it twice."""
    from executor_sft.schema import TokenUsage

    class CountingAnswerer(ScriptedChatModel):
        async def chat(self, messages, tools=None, sampling=None):
            result = await super().chat(messages, tools, sampling)
            result.usage = TokenUsage(prompt_tokens=5, completion_tokens=2, calls=3)
            return result

    answerer = CountingAnswerer(default=last_report_answerer()._default, name="answerer")
    ep = await run_episode(QUESTION, models(answerer=answerer), ToyRetriever(), PipelineConfig())
    assert ep.error is None and ep.answer == "Eldmark"
    student = ep.runs_for("student")
    assert [r.outcome.answer for r in student] == ["Eldmark", "Eldmark", "Salt Mines"]
    assert ep.usage["answerer_outcomes"].calls == 3  # one labelling call per shadow run, counted once each


# --- outcome modes: substitute vs replay on a two-hop chain ----------------------------------

TWO_HOP = Question(
    id="q-velmora-2hop",
    question="Where was the founder of Velmora born?",
    golden_answers=["Tarsin"],
    dataset="toy",
)
HOP1, HOP2 = "Who founded Velmora?", "Where was {} born?"


def reactive_backbone():
    """Hop 1, then hop 2 built from the last report's answer (as a real backbone would), then stop."""

    def policy(messages, tools):
        feedback = [m["content"] for m in messages if m["role"] == "user" and "Report" in m["content"]]
        if not feedback:
            return f"<subquery>{HOP1}</subquery>"
        if len(feedback) == 1:
            bridge = re.findall(r"<answer>(.*?)</answer>", feedback[-1])[-1]
            return f"<subquery>{HOP2.format(bridge)}</subquery>"
        return "<stop/>"

    return ScriptedChatModel(default=policy, name="backbone")


def two_hop_models():
    beliefs = {HOP1: "Ada Krell", HOP2.format("Ada Krell"): "Tarsin", HOP2.format("Orrin Vale"): "Velmora"}
    return {
        "backbone": reactive_backbone(),
        "answerer": last_report_answerer(),  # repeats the last report: blind to a wrong bridge hop
        "teacher": executor(beliefs, n_searches=1, name="teacher"),
        "student": executor({**beliefs, HOP1: "Orrin Vale"}, n_searches=1, name="student"),  # wrong bridge
    }


async def test_replay_flips_a_substitution_correct_wrong_bridge_to_wrong():
    for mode in ("substitute", "replay"):
        ms = two_hop_models()
        config = PipelineConfig(max_rounds=3, outcome={"mode": mode})
        ep = await run_episode(TWO_HOP, ms, ToyRetriever(), config)
        assert ep.answer == "Tarsin" and ep.metrics.em == 1.0
        bridge = ep.runs_for("student")[0]
        assert bridge.report.answer == "Orrin Vale" and bridge.round == 0
        outcome = bridge.outcome
        if mode == "substitute":
            # the answerer repeats the (driver's) last report: the wrong bridge looks harmless
            assert outcome.answer == "Tarsin" and outcome.em == 1.0 and outcome.mode is None
            assert "backbone_replay" not in ep.usage
            continue
        # replay: the backbone's hop 2 is built from "Orrin Vale", the driver answers that
        assert outcome.mode == "replay" and outcome.substituted
        assert outcome.answer == "Velmora" and outcome.em == 0.0
        replay = outcome.replay
        assert replay["from_round"] == 0 and replay["stop_reason"] == "stopped"
        assert [r["sub_queries"] for r in replay["rounds"]] == [[HOP2.format("Orrin Vale")], []]
        (rerun,) = replay["runs"]
        assert rerun["role"] == "teacher" and rerun["round"] == 1
        assert rerun["run_id"] == f"{bridge.run_id}/replay/r1/q0/teacher"
        # the kept conversation is the episode's, up to and including round 0's decision
        kept = ep.rounds[1].backbone.messages
        replayed = replay["rounds"][0]["backbone"]["messages"]
        assert replayed[:3] == kept[:3] and "Orrin Vale" in replayed[3]["content"]
        assert "Orrin Vale" not in kept[3]["content"]
        # the answerer saw the substituted bridge and the replayed hop, nothing of the original hop 2
        text = outcome.answerer_call["messages"][-1]["content"]
        assert "<answer>Orrin Vale</answer>" in text and "<answer>Velmora</answer>" in text
        assert "Ada Krell" not in text
        # the student's hop-2 run (a right answer, other evidence) replays from round 1: the backbone stops
        hop2 = ep.runs_for("student")[1].outcome
        assert hop2.mode == "replay" and hop2.answer == "Tarsin" and hop2.em == 1.0
        assert hop2.replay["from_round"] == 1 and [r["sub_queries"] for r in hop2.replay["rounds"]] == [[]]
        # cost: backbone 2 (hop 2 + stop) + 1 (stop), teacher 2 (search + report), answerer 1 + 1
        assert ep.usage["backbone_replay"].calls == 3 and ep.usage["executor_replay"].calls == 2
        assert ep.usage["answerer_outcomes"].calls == 2
        assert ep.usage["backbone"].calls == 3  # the episode's own count is unchanged
        again = Episode.model_validate_json(ep.to_json())
        assert again.runs_for("student")[0].outcome == outcome


async def test_replay_of_a_counterfactual_and_of_the_last_round():
    ms = two_hop_models()
    config = PipelineConfig(max_rounds=3, executor_roles=["teacher"], outcome={"mode": "replay"})
    ep = await run_episode(TWO_HOP, ms, ToyRetriever(), config)
    wrong_once = executor({HOP1: "Orrin Vale"}, n_searches=1, name="teacher-b1")
    with pytest.raises(ValueError, match="needs models"):
        await run_counterfactual(ep, ep.runs[0], wrong_once, ToyRetriever(), ms["answerer"], config=config)
    cf = await run_counterfactual(
        ep, ep.runs[0], wrong_once, ToyRetriever(), ms["answerer"], config=config, models=ms
    )
    assert cf.role == "teacher_budget1" and cf.outcome.mode == "replay" and cf.outcome.em == 0.0
    assert cf.outcome.answer == "Velmora"
    # a report swapped into the last executed round: the backbone continues from there (it stops)
    last = ep.runs[1].model_copy(update={"report": Report(answer="Salt Mines")})
    out = await answer_with_replay(ep, last, ms, ToyRetriever(), config=config)
    assert out.answer == "Salt Mines" and [r["sub_queries"] for r in out.replay["rounds"]] == [[]]
    # with the round budget spent after that round, no backbone call: as substitution
    short = PipelineConfig(max_rounds=2, executor_roles=["teacher"], outcome={"mode": "replay"})
    n = len(ms["backbone"].requests)
    out = await answer_with_replay(ep, last, ms, ToyRetriever(), config=short)
    assert out.answer == "Salt Mines" and out.replay["rounds"] == [] and len(ms["backbone"].requests) == n
    assert out.replay["stop_reason"] == "round_budget"


def test_outcome_mode_is_left_out_of_records_by_default():
    assert "outcome" not in PipelineConfig().model_dump(mode="json")
    assert PipelineConfig(outcome={"mode": "replay"}).model_dump(mode="json")["outcome"] == {"mode": "replay"}
    with pytest.raises(ValueError):
        PipelineConfig(outcome={"mode": "rerun"})

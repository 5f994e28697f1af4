"""The CLP reward and the TRL reward functions built on it."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_sft.errors import ConfigError
from executor_sft.grpo.rewards import (
    REWARDS,
    CLPReward,
    JudgeCLPReward,
    clp_judge,
    clp_reward,
    count_tool_calls,
    final_report,
)

EPS = 0.15
calls = st.integers(min_value=0, max_value=10_000)
scores = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
epsilons = st.floats(min_value=0.01, max_value=2.0, allow_nan=False)


def search_turn(query: str = "q") -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": query}}}],
    }


def tool_turn(text: str = "Doc 1 (Title: T) passage") -> dict:
    return {"role": "tool", "name": "search", "content": text}


def report_turn(answer: str, evidence: str = "from Doc 1") -> dict:
    return {"role": "assistant", "content": f"<answer>{answer}</answer>\n<evidence>{evidence}</evidence>"}


def completion(answer: str | None, searches: int) -> list[dict]:
    msgs: list[dict] = []
    for i in range(searches):
        msgs += [search_turn(f"q{i}"), tool_turn()]
    msgs.append(
        report_turn(answer) if answer is not None else {"role": "assistant", "content": "I am not sure."}
    )
    return msgs


# --- clp_reward ------------------------------------------------------------------------


@given(calls, epsilons)
def test_wrong_answer_scores_zero(n, eps):
    assert clp_reward(0.0, n, eps) == 0.0


@given(scores, calls, epsilons)
def test_reward_in_unit_interval(score, n, eps):
    assert 0.0 <= clp_reward(score, n, eps) <= score <= 1.0


@given(scores, calls, st.integers(min_value=1, max_value=100), epsilons)
def test_non_increasing_in_tool_calls(score, n, more, eps):
    assert clp_reward(score, n + more, eps) <= clp_reward(score, n, eps)


@given(calls, epsilons)
def test_positive_below_threshold_zero_from_it(n, eps):
    threshold = math.exp(1 / eps) - 1
    if abs(n - threshold) < 1e-6 * max(1.0, threshold):
        return  # exactly at the boundary the value is 0 up to rounding
    assert (clp_reward(1.0, n, eps) > 0) == (n < threshold)


def test_default_boundary_is_784_calls():
    threshold = math.exp(1 / EPS) - 1  # 784.6...
    assert 784 < threshold < 785
    assert clp_reward(1.0, 784) > 0
    assert clp_reward(1.0, 785) == 0.0
    assert clp_reward(1.0, 10**6) == 0.0


def test_known_values():
    assert clp_reward(1.0, 0) == 1.0
    assert clp_reward(1.0, 1) == pytest.approx(1 - 0.15 * math.log(2))
    assert clp_reward(1.0, 2) == pytest.approx(1 - 0.15 * math.log(3))
    assert clp_reward(0.5, 1) == pytest.approx(0.5 * (1 - 0.15 * math.log(2)))
    # diminishing marginal cost: the second search costs less than the first
    assert 1 - clp_reward(1.0, 1) > clp_reward(1.0, 1) - clp_reward(1.0, 2)


@given(scores, calls, epsilons)
def test_scales_linearly_with_score(score, n, eps):
    assert clp_reward(score, n, eps) == pytest.approx(score * clp_reward(1.0, n, eps))


def test_rejects_bad_inputs():
    with pytest.raises(ValueError, match="tool_calls"):
        clp_reward(1.0, -1)
    with pytest.raises(ValueError, match="eps"):
        clp_reward(1.0, 1, eps=-0.1)


# --- parsing completions ---------------------------------------------------------------------


def test_count_tool_calls_counts_every_call():
    msgs = completion("Paris", 2)
    assert count_tool_calls(msgs) == 2
    double = {**search_turn(), "tool_calls": search_turn()["tool_calls"] * 2}
    assert count_tool_calls([double, tool_turn(), tool_turn(), report_turn("x")]) == 2
    assert count_tool_calls("plain text <tool_call>") == 0  # text is never a call
    assert count_tool_calls([]) == 0


def test_final_report_format_check():
    assert final_report(completion("Paris", 1)).answer == "Paris"
    assert final_report(completion(None, 1)) is None  # no <answer> tag
    assert final_report([]) is None
    # an <answer> next to a search call is not a report: the search would run first
    assert final_report([{**search_turn(), "content": "<answer>Paris</answer>"}]) is None
    # an answer in an earlier turn does not rescue a final turn without one
    assert (
        final_report(
            [report_turn("Paris"), search_turn(), tool_turn(), {"role": "assistant", "content": "hm"}]
        )
        is None
    )
    # reasoning never counts as the report
    assert (
        final_report(
            [{"role": "assistant", "content": "<think><answer>Rome</answer></think> <answer>Paris</answer>"}]
        ).answer
        == "Paris"
    )
    assert (
        final_report(
            [{"role": "assistant", "reasoning_content": "<answer>Rome</answer>", "content": "no tag"}]
        )
        is None
    )
    assert final_report("<answer>Paris</answer>").answer == "Paris"


# --- TRL reward functions ---------------------------------------------------------------------


def test_em_reward_scores_and_logs():
    logged: dict[str, list[float]] = {}
    reward = CLPReward("em")
    comps = [
        completion("Paris", 1),
        completion("the Paris!", 2),
        completion("Lyon", 1),
        completion(None, 1),
        completion("Paris", 0),
    ]
    out = reward(
        prompts=[[{"role": "user", "content": "q"}]] * 5,
        completions=comps,
        reference=[["Paris"], ["Paris"], ["Paris"], ["Paris"], "Paris"],
        log_metric=lambda k, v: logged.setdefault(k, []).append(v),
    )
    # the last is right without a search: the blog's CLP gives it 1.0 (clp_em_grounded: 0)
    assert out == pytest.approx([clp_reward(1, 1), clp_reward(1, 2), 0.0, 0.0, 1.0])
    assert reward.__name__ == "clp_em"
    assert logged["executor/tool_calls"] == [pytest.approx(1.0)]
    grounded_reward = REWARDS.get("clp_em_grounded")()
    assert grounded_reward.__name__ == "clp_em_grounded"
    assert grounded_reward(completions=comps, reference=[["Paris"]] * 5)[4] == 0.0
    assert logged["executor/correct"] == [pytest.approx(3 / 5)]
    assert logged["executor/format_ok"] == [pytest.approx(4 / 5)]
    assert logged["executor/answer_score"] == [pytest.approx(3 / 5)]


@pytest.mark.parametrize(("grounding_score", "expected"), [(None, 1.0), (0.5, 0.5), (0.0, 0.0)])
def test_a_correct_zero_search_report_scores_the_grounding_score(grounding_score, expected):
    reward = CLPReward("em", grounding_score=grounding_score)
    out = reward(completions=[completion("Paris", 0), completion("Paris", 1)], reference=[["Paris"]] * 2)
    assert out == pytest.approx([expected, clp_reward(1, 1)])  # one search: CLP, whatever the rule


def test_grounding_score_is_checked():
    with pytest.raises(ConfigError, match="grounding_score must be in"):
        CLPReward("em", grounding_score=2.0)


def test_em_matches_any_alias():
    out = CLPReward("em")(completions=[completion("NYC", 1)], reference=[["New York City", "NYC"]])
    assert out == [pytest.approx(clp_reward(1, 1))]


def test_f1_reward_gives_partial_credit():
    reward = CLPReward("f1")
    out = reward(
        completions=[completion("Paris France", 1), completion("Rome", 1)], reference=[["Paris"], ["Paris"]]
    )
    assert out[0] == pytest.approx((2 / 3) * clp_reward(1, 1))
    assert out[1] == 0.0
    assert reward.__name__ == "clp_f1"


def test_reward_needs_reference_column():
    with pytest.raises(ValueError, match="reference"):
        CLPReward()(completions=[completion("x", 1)])
    with pytest.raises(ValueError, match="2 entries for 1"):
        CLPReward()(completions=[completion("x", 1)], reference=[["x"], ["y"]])


def test_clp_reward_validates_metric():
    with pytest.raises(ValueError, match="metric"):
        CLPReward("judge")  # type: ignore[arg-type]


class ScriptedJudge:
    """Says True when the prediction is in its accepted set; records what it was asked."""

    def __init__(self, accept: set[str], verdict_for_unknown: bool | None = False):
        self.accept, self.unknown, self.calls = accept, verdict_for_unknown, []

    def __call__(self, question, golden, prediction):
        self.calls.append((question, list(golden), prediction))
        return True if prediction in self.accept else self.unknown


def test_judge_reward_sync_judge():
    judge = ScriptedJudge({"The Big Apple"})
    reward = clp_judge(judge)
    assert isinstance(reward, JudgeCLPReward) and reward.__name__ == "clp_judge"
    comps = [completion("The Big Apple", 1), completion("Boston", 2), completion(None, 1)]
    out = reward.score_sync(
        prompts=[[{"role": "user", "content": "Which city?"}]] * 3,
        completions=comps,
        reference=[["New York City"]] * 3,
        sub_query=["Which city is nicknamed the Big Apple?"] * 3,
    )
    assert out == pytest.approx([clp_reward(1, 1), 0.0, 0.0])
    # the unparseable report never reaches the judge; the sub-query column is the question
    assert judge.calls == [
        ("Which city is nicknamed the Big Apple?", ["New York City"], "The Big Apple"),
        ("Which city is nicknamed the Big Apple?", ["New York City"], "Boston"),
    ]


def test_judge_reward_async_judge_and_null_verdict():
    seen = []

    async def judge(question, golden, prediction):
        await asyncio.sleep(0)
        seen.append(question)
        return None if prediction == "maybe" else prediction == golden[0]

    reward = JudgeCLPReward(judge, eps=0.5)
    out = reward.score_sync(
        prompts=[[{"role": "system", "content": "s"}, {"role": "user", "content": "Q?"}]] * 2,
        completions=[completion("yes", 3), completion("maybe", 0)],
        reference=[["yes"], ["yes"]],
    )
    assert out == pytest.approx([clp_reward(1, 3, 0.5), 0.0])  # a null verdict is not correct
    assert seen == ["Q?", "Q?"]  # without a sub_query column: the prompt's user turn


def test_a_judge_outage_is_no_reward_not_a_crashed_step():
    from executor_sft.llm.base import ChatError
    from executor_sft.metrics.judge import LLMJudge

    class Down:
        name = "down"

        async def chat(self, messages, tools=None, sampling=None):
            raise ChatError("judge endpoint down")

    reward = JudgeCLPReward(LLMJudge(Down()), eps=0.5)
    out = reward.score_sync(
        prompts=[[{"role": "user", "content": "Q?"}]], completions=[completion("yes", 1)], reference=[["yes"]]
    )
    assert out == [0.0]


@pytest.mark.slow  # importing trl takes seconds
def test_trl_sees_judge_reward_as_async():
    from trl.trainer.utils import get_callable_name, is_async_callable

    reward = clp_judge(ScriptedJudge(set()))
    assert is_async_callable(reward)
    assert not is_async_callable(CLPReward("em"))
    assert get_callable_name(reward) == "clp_judge"


def test_judge_reward_with_llm_judge():
    from executor_sft.metrics.judge import LLMJudge
    from tests.support.doubles import ScriptedChatModel

    # The judge model says False only when it is asked about the wrong prediction.
    chat = ScriptedChatModel(
        default=lambda messages, tools: "False" if "Boston" in messages[-1]["content"] else "True"
    )
    reward = clp_judge(LLMJudge(chat))
    out = reward.score_sync(
        completions=[completion("NYC", 1), completion("Boston", 1), completion(None, 0)],
        reference=[["New York City"]] * 3,
        sub_query=["Which city is nicknamed the Big Apple?"] * 3,
    )
    assert out == pytest.approx([clp_reward(1, 1), 0.0, 0.0])
    assert len(chat.requests) == 2  # no report, no judge call


def test_count_tool_calls_skips_calls_refused_over_budget():
    from executor_sft.agents.prompting import Prompts

    refusal = tool_turn(Prompts().search_budget_spent)
    over = [search_turn("a"), tool_turn(), search_turn("b"), tool_turn(), search_turn("c"), refusal]
    assert count_tool_calls([*over, report_turn("x")]) == 2
    blocks = {**refusal, "content": [{"type": "text", "text": refusal["content"] + "\n"}]}
    assert count_tool_calls([search_turn("a"), tool_turn(), search_turn("b"), blocks]) == 1
    assert count_tool_calls([search_turn(), tool_turn("budget gone")], refusal="budget gone") == 0
    # the reward charges only the executed searches
    reward = CLPReward()
    got = reward(completions=[[*over, report_turn("Paris")]], reference=[["Paris"]])
    assert got == [pytest.approx(clp_reward(1.0, 2))]


@pytest.mark.parametrize(
    ("name", "calls", "expected"),
    [
        ("clp_em", 0, 1.0),  # a correct zero-search answer: the blog's formula gives 1.0
        ("clp_em_grounded", 0, 0.0),
        ("clp_em", 4, 1 - 0.15 * math.log(5)),
        ("additive", 0, 1.0 + 0.15),
        ("additive", 3, 1.0 + 0.15 / 4),
        ("linear", 2, 1.0 - 0.25 * 2),
        ("linear", 5, 1.0 - 0.25 * 5),  # the blog's example: below 0, worse than a wrong answer
    ],
)
def test_the_blogs_rewards_on_a_correct_answer(name, calls, expected):
    reward = REWARDS.get(name)()
    assert reward(completions=[completion("Paris", calls)], reference=[["Paris"]]) == [
        pytest.approx(expected)
    ]


def test_additive_pays_a_fast_wrong_answer_and_linear_does_not():
    wrong = [completion("Lyon", 0)]
    assert REWARDS.get("additive")(alpha=0.2)(completions=wrong, reference=[["Paris"]]) == [
        pytest.approx(0.2)
    ]
    assert REWARDS.get("linear")()(completions=wrong, reference=[["Paris"]]) == [0.0]
    assert REWARDS.get("linear")().__name__ == "linear"

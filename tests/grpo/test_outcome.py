"""The `outcome` reward on the sample data: the world's answerer, the episode the row came from, gold answers.

Rows are built from data/rollouts.jsonl (the synthetic world's collection) and the answerer is
the world's scripted one, which composes the final answer from the findings alone.
"""

from __future__ import annotations

import functools
import json

import pytest
from post_training import NUM_GENERATIONS, ROOT, Script, install_script

from executor_sft.errors import ConfigError
from executor_sft.files import iter_jsonl
from executor_sft.grpo import OUTCOME_COLUMNS, GRPOScriptArguments, build_grpo_trainer, build_reward_funcs
from executor_sft.grpo.data import grpo_examples_from_rollouts
from executor_sft.grpo.rewards import clp_em, clp_reward
from executor_sft.synthetic.scripted_answerer import world_answerer

ROLLOUTS = ROOT / "data" / "rollouts.jsonl"
WORLD = ROOT / "data" / "world"


@functools.cache
def rows() -> list[dict]:
    return grpo_examples_from_rollouts(ROLLOUTS)


@pytest.fixture(scope="module")
def answerer():
    return world_answerer(str(WORLD))


def completion(answer: str | None, searches: int) -> list[dict]:
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": "q"}}}
    msgs: list[dict] = []
    for _ in range(searches):
        msgs += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "search", "content": "Doc 1 (Title: T) passage"},
        ]
    last = (
        f"<answer>{answer}</answer>\n<evidence>Doc 1.</evidence>" if answer is not None else "I am not sure."
    )
    return [*msgs, {"role": "assistant", "content": last}]


def columns(row: dict, n: int) -> dict:
    return {k: [row[k]] * n for k in (*OUTCOME_COLUMNS, "reference")}


def outcome_reward(answerer, **kwargs):
    (reward,) = build_reward_funcs(["outcome"], {"outcome": kwargs}, judge=None, answerer=lambda: answerer)
    return reward


def test_rows_carry_the_episode_the_sub_query_came_from():
    episodes = {json.loads(line)["episode_id"]: json.loads(line) for line in ROLLOUTS.open(encoding="utf-8")}
    for row in rows():
        ep = episodes[row["episode_id"]]
        dispatched = [q for rnd in ep["rounds"] for q in rnd["sub_queries"]]
        assert [f["sub_query"] for f in row["findings"]] == dispatched
        assert row["findings"][row["position"]]["sub_query"] == row["sub_query"]
        assert row["question"] == ep["question"]["question"]
        assert row["golden_answers"] == ep["question"]["golden_answers"]


def test_a_rollout_that_repeats_a_wrong_teacher_answer_scores_zero(answerer):
    """A teacher's wrong report (here the budget-1 teacher's: a namesake's birth year) as the reference:
    the teacher-reference reward pays for repeating it, the outcome reward does not; the gold answer is
    what the outcome reward pays for."""
    wrong = next(
        (ep, run)
        for _, ep in iter_jsonl(ROLLOUTS)
        for run in ep["runs"]
        if run["role"].startswith("teacher") and run["report"] and run["outcome"]["em"] == 0.0
    )
    ep, run = wrong
    row = next(
        r for r in rows() if r["episode_id"] == ep["episode_id"] and r["sub_query"] == run["sub_query"]
    )
    teacher_answer, right = run["report"]["answer"], row["reference"][0]
    assert teacher_answer != right
    comps = [completion(teacher_answer, 1), completion(right, 1)]
    cols = columns({**row, "reference": [teacher_answer]}, 2)
    assert clp_em()(completions=comps, **cols) == pytest.approx([clp_reward(1, 1), 0.0])
    reward = outcome_reward(answerer)
    assert reward.score_sync(completions=comps, **cols) == [0.0, 1.0]
    assert [s.answer for s in reward.last] == [run["outcome"]["answer"], ep["question"]["golden_answers"][0]]


def test_the_substitution_uses_the_rest_of_the_episode(answerer):
    """The same right report at hop 2 scores 1 after the driver's hop 1, and 0 once hop 1's
    finding names someone else (the chain no longer leads to the gold answer)."""
    row = next(
        r
        for r in rows()
        if r["position"] == 1 and len(r["findings"]) == 2 and r["question"].startswith("In what year")
    )
    reward = outcome_reward(answerer)
    comps = [completion(row["reference"][0], 1)]
    assert reward.score_sync(completions=comps, **columns(row, 1)) == [1.0]
    broken = [{**row["findings"][0], "answer": "Someone Else"}, row["findings"][1]]
    assert reward.score_sync(completions=comps, **columns({**row, "findings": broken}, 1)) == [0.0]


@pytest.mark.parametrize(
    ("grounding_score", "expected"),
    [({}, 0.0), ({"grounding_score": 0.25}, 0.25), ({"grounding_score": None}, 1.0)],
)
def test_a_correct_zero_search_answer_gets_the_configured_grounding_score(
    answerer, grounding_score, expected
):
    row = rows()[0]
    reward = outcome_reward(answerer, **grounding_score)
    out = reward.score_sync(
        completions=[completion(row["reference"][0], 0), completion(row["reference"][0], 2)],
        **columns(row, 2),
    )
    assert out == [expected, 1.0]  # outcome has no search discount: that is CLP's job


def test_no_report_scores_zero_without_an_answerer_call():
    class Counting:
        calls = 0

        async def chat(self, *args, **kwargs):
            Counting.calls += 1
            raise AssertionError("no call expected")

    reward = outcome_reward(Counting())
    assert reward.score_sync(completions=[completion(None, 1)], **columns(rows()[0], 1)) == [0.0]
    assert Counting.calls == 0


def test_agent_average_weighs_each_question_once(answerer):
    three = next(r for r in rows() if len(r["findings"]) == 3)
    reward = outcome_reward(answerer, agent_average=True)
    out = reward.score_sync(completions=[completion(three["reference"][0], 1)], **columns(three, 1))
    assert out == [pytest.approx(1 / 3)]
    from trl import GRPOConfig

    with pytest.raises(ConfigError, match="agent_average needs scale_rewards: batch or none"):
        reward.check_training_args(GRPOConfig(output_dir="unused", scale_rewards="group", use_cpu=True))
    reward.check_training_args(GRPOConfig(output_dir="unused", scale_rewards="batch", use_cpu=True))


def test_rows_without_the_episode_and_a_missing_answerer_are_config_errors(tmp_path, answerer):
    from trl import GRPOConfig, ModelConfig

    from executor_sft.grpo import to_dataset

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, reward_weights=[1.0, 1.0], report_to="none")
    script = GRPOScriptArguments(reward_funcs=["outcome", "clp_em"], retriever={"index": "unused"})
    bare = to_dataset([{"prompt": r["prompt"], "reference": r["reference"]} for r in rows()[:2]])
    with pytest.raises(ConfigError, match=r"reward 'outcome' needs the dataset columns \['question'"):
        build_grpo_trainer(
            script, args, ModelConfig("offline:tiny-qwen3"), train_dataset=bare, answerer=answerer
        )
    with pytest.raises(ConfigError, match="the outcome rewards need `answerer`"):
        build_grpo_trainer(script, args, ModelConfig("offline:tiny-qwen3"), train_dataset=bare)


@pytest.mark.slow
def test_two_grpo_steps_with_outcome_and_clp(tiny_checkpoint, world_index, tmp_path, answerer):
    """A real 2-step GRPO run with `reward_funcs: [outcome, clp_em]`: per group two rollouts report the
    teacher's (right) answer after one search, one a wrong one, one writes free text."""
    from trl import GRPOConfig, ModelConfig

    from executor_sft.grpo import to_dataset
    from executor_sft.retrieval.config import build_retriever

    picked = [r for r in rows() if r["position"] == 0][:2]
    script_args = GRPOScriptArguments(
        reward_funcs=["outcome", "clp_em"], retriever={"index": str(world_index), "k": 1}, max_searches=1
    )
    training_args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=1024,
        reward_weights=[1.0, 0.5],
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        chat_template_kwargs={"enable_thinking": False},
    )
    trainer = build_grpo_trainer(
        script_args,
        training_args,
        ModelConfig(model_name_or_path=str(tiny_checkpoint)),
        train_dataset=to_dataset(picked),
        retriever=build_retriever(script_args.retriever_config()),
        answerer=answerer,
    )
    install_script(
        trainer.model,
        Script(trainer.processing_class, sub_queries=[(r["sub_query"], r["reference"][0]) for r in picked]),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    for h in logs:
        assert h["rewards/outcome/mean"] == pytest.approx(2 / NUM_GENERATIONS)
        assert h["rewards/clp_em/mean"] == pytest.approx(2 * clp_reward(1, 1) / NUM_GENERATIONS, abs=1e-3)
        assert h["reward"] == pytest.approx(
            h["rewards/outcome/mean"] + 0.5 * h["rewards/clp_em/mean"], abs=1e-3
        )
        assert h["outcome/correct"] == pytest.approx(0.5) and h["outcome/searches"] == pytest.approx(0.75)


def test_a_missing_prompt_file_is_a_config_error(tmp_path):
    from executor_sft.grpo import load_prompt_dataset

    for source in (
        {"dataset_name": str(tmp_path / "no.jsonl")},
        {"rollouts": [str(ROLLOUTS), str(tmp_path / "r")]},
    ):
        with pytest.raises(ConfigError, match=r"(dataset_name|rollouts): .*: no such file"):
            load_prompt_dataset(GRPOScriptArguments(**source))

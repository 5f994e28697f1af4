"""`reward_funcs` + `reward_kwargs` -> TRL reward functions: the registry, the judge, the checks."""

from __future__ import annotations

import functools

import pytest

from executor_sft.errors import ConfigError, UserError
from executor_sft.grpo import REWARDS, CLPReward, GRPOScriptArguments, JudgeCLPReward, build_reward_funcs
from executor_sft.grpo.reward_funcs import check_reward_weights
from executor_sft.grpo.train import build_judge
from executor_sft.registry import UnknownNameError


def no_judge():
    raise AssertionError("the judge was built although no reward needs it")


class LengthPenalty:
    """A user's reward: -chars/1000 of the final turn."""

    def __init__(self, per_char: float = 0.001):
        self.per_char = per_char

    def __call__(self, prompts, completions, **columns):
        return [-self.per_char * len(c[-1]["content"]) for c in completions]


@pytest.fixture
def registered():
    REWARDS.register("length_penalty", LengthPenalty)
    yield "length_penalty"
    REWARDS.unregister("length_penalty")


def test_built_ins_are_registry_entries():
    assert {"clp_em", "clp_f1", "clp_judge"} <= set(REWARDS.names())
    em, f1 = build_reward_funcs(["clp_em", "clp_f1"], {"clp_f1": {"eps": 0.5}}, no_judge)
    assert isinstance(em, CLPReward) and (em.metric, em.eps, em.__name__) == ("em", 0.15, "clp_em")
    assert (f1.metric, f1.eps, f1.__name__) == ("f1", 0.5, "clp_f1")


def test_a_registered_name_and_an_import_path_build_alike(registered):
    (by_name,) = build_reward_funcs([registered], {}, no_judge)
    path = "test_reward_funcs:LengthPenalty"
    (by_path,) = build_reward_funcs([path], {path: {"per_char": 0.5}}, no_judge)
    assert isinstance(by_name, LengthPenalty) and isinstance(by_path, LengthPenalty)
    assert (by_name.per_char, by_path.per_char) == (0.001, 0.5)
    assert by_name(prompts=[None], completions=[[{"role": "assistant", "content": "abcd"}]]) == [-0.004]


def test_logged_name_clash_is_refused(registered):
    # two instances of one class log under one name: TRL would merge their columns
    with pytest.raises(ConfigError, match="two rewards log as 'rewards/LengthPenalty/mean'"):
        build_reward_funcs([registered, "test_reward_funcs:LengthPenalty"], {}, no_judge)


def test_the_judge_is_built_once_and_only_for_factories_that_take_one():
    built = []

    def judge_provider():
        built.append(object())
        return lambda question, golden, prediction: True

    def steep_judge_reward(judge, eps: float = 0.5):
        reward = JudgeCLPReward(judge, eps=eps)
        reward.__name__ = "steep_judge"
        return reward

    REWARDS.register("steep_judge", steep_judge_reward)
    try:
        provider = functools.cache(judge_provider)
        clp, steep = build_reward_funcs(["clp_judge", "steep_judge"], {"steep_judge": {"eps": 0.3}}, provider)
    finally:
        REWARDS.unregister("steep_judge")
    assert len(built) == 1 and clp.judge is steep.judge and steep.eps == 0.3

    def own(question, golden, prediction):
        return True

    (given,) = build_reward_funcs(["clp_judge"], {"clp_judge": {"judge": own}}, no_judge)
    assert given.judge is own


def test_clp_judge_without_a_judge_is_a_user_error():
    args = GRPOScriptArguments(reward_funcs=["clp_judge"])
    with pytest.raises(ConfigError, match="reward clp_judge needs `judge`"):
        build_reward_funcs(args.reward_funcs, args.reward_kwargs, lambda: build_judge(args))


@pytest.mark.parametrize(
    ("names", "kwargs", "error", "message"),
    [
        (["clp_emm"], {}, UnknownNameError, "unknown reward 'clp_emm': did you mean 'clp_em'?"),
        (["nope_mod:R"], {}, UnknownNameError, "cannot import module 'nope_mod'"),
        (["test_reward_funcs:Missing"], {}, UnknownNameError, "has no attribute 'Missing'"),
        (["test_reward_funcs:__doc__"], {}, ConfigError, "is not callable"),
        ([], {}, ConfigError, "name at least one reward"),
        (["clp_em", "clp_em"], {}, ConfigError, "'clp_em' is listed twice"),
        (["clp_em"], {"clp_f1": {}}, ConfigError, "'clp_f1' is not one of reward_funcs"),
        (["clp_em"], {"clp_em": 0.2}, ConfigError, "reward_kwargs.clp_em: expected a mapping"),
        (["clp_em"], {"clp_em": {"epsilon": 0.2}}, ConfigError, "unexpected keyword argument 'epsilon'"),
    ],
)
def test_bad_reward_config_is_refused_when_parsed(names, kwargs, error, message):
    with pytest.raises(error, match=message) as info:
        GRPOScriptArguments(reward_funcs=names, reward_kwargs=kwargs)
    assert isinstance(info.value, UserError) and isinstance(info.value, ValueError)  # one line, exit 2


def test_reward_kwargs_from_the_command_line_and_missing_arguments():
    args = GRPOScriptArguments(reward_funcs=["clp_f1"], reward_kwargs="{clp_f1: {eps: 0.4}}")
    assert args.reward_kwargs == {"clp_f1": {"eps": 0.4}}
    with pytest.raises(ValueError, match="reward_kwargs: expected a mapping"):
        GRPOScriptArguments(reward_kwargs="[clp_em]")

    def needs_scale(scale: float):
        return LengthPenalty(scale)

    REWARDS.register("needs_scale", needs_scale)
    try:
        args = GRPOScriptArguments(reward_funcs=["needs_scale"])  # partial arguments parse ...
        with pytest.raises(ConfigError, match="reward_kwargs.needs_scale: missing a required argument"):
            build_reward_funcs(args.reward_funcs, args.reward_kwargs, no_judge)  # ... but do not build
    finally:
        REWARDS.unregister("needs_scale")


def test_factory_that_returns_no_function():
    REWARDS.register("broken", lambda: 3)
    try:
        with pytest.raises(ConfigError, match="reward 'broken': its factory returned 3"):
            build_reward_funcs(["broken"], {}, no_judge)
    finally:
        REWARDS.unregister("broken")


def test_weights_must_match_the_rewards():
    check_reward_weights(["clp_em", "x"], None)
    check_reward_weights(["clp_em", "x"], [1.0, 0.5])
    with pytest.raises(ConfigError, match=r"reward_weights: 1 weight\(s\) for 2 reward\(s\)"):
        check_reward_weights(["clp_em", "x"], [1.0])

"""The rewards of one GRPO run: `reward_funcs` names and `reward_kwargs` -> TRL reward functions.

Each name is a `REWARDS` entry or a `module:attr` factory; `reward_kwargs[name]` are the
factory's keyword arguments. A factory with a `judge` (or `answerer`) parameter that
`reward_kwargs` leaves out gets the run's configured judge (or answerer). The weights are
TRL's own `GRPOConfig.reward_weights`.
Everything a user can get wrong is checked before any model loads.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import executor_sft.grpo.outcome  # noqa: F401  (registers the outcome rewards)
from executor_sft.errors import ConfigError
from executor_sft.grpo.rewards import REWARDS, RewardFactory, RewardFunc

JUDGE_PARAMETER = "judge"
ANSWERER_PARAMETER = "answerer"


def reward_factory(name: str) -> RewardFactory:
    """The factory `name` resolves to (`UnknownNameError` for an unknown name or path)."""
    factory = REWARDS.get(name)
    if not callable(factory):
        raise ConfigError(
            f"reward {name!r}: {factory!r} is not callable (give a factory of a reward function)"
        )
    return factory


def _signature(factory: RewardFactory) -> inspect.Signature | None:
    try:
        return inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have none: their arguments go unchecked
        return None


def wants(factory: RewardFactory, parameter: str) -> bool:
    """Whether the factory takes `parameter` (the run's judge or answerer is passed in then)."""
    sig = _signature(factory)
    return sig is not None and parameter in sig.parameters


def _bind(name: str, factory: RewardFactory, kwargs: Mapping[str, Any], partial: bool) -> None:
    sig = _signature(factory)
    if sig is None:
        return
    try:
        (sig.bind_partial if partial else sig.bind)(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"reward_kwargs.{name}: {exc}") from None


def check_rewards(names: Sequence[str], kwargs: Mapping[str, Any]) -> None:
    """Names resolve, none repeats, and every `reward_kwargs` entry fits its factory."""
    if not names:
        raise ConfigError("reward_funcs: name at least one reward (e.g. [clp_em])")
    repeated = sorted({n for n in names if list(names).count(n) > 1})
    if repeated:
        raise ConfigError(f"reward_funcs: {repeated[0]!r} is listed twice (one entry per reward)")
    for key, value in kwargs.items():
        if key not in names:
            raise ConfigError(f"reward_kwargs: {key!r} is not one of reward_funcs {list(names)}")
        if not isinstance(value, Mapping):
            raise ConfigError(f"reward_kwargs.{key}: expected a mapping of keyword arguments, got {value!r}")
    for name in names:
        _bind(name, reward_factory(name), kwargs.get(name, {}), partial=True)


def check_reward_weights(names: Sequence[str], weights: Sequence[float] | None) -> None:
    if weights is not None and len(weights) != len(names):
        raise ConfigError(
            f"reward_weights: {len(weights)} weight(s) for {len(names)} reward(s) {list(names)}; "
            "give one weight per reward_funcs entry (or none: all 1.0)"
        )


def _no_answerer() -> Any:
    raise ConfigError("the outcome rewards need `answerer` (the fixed answerer's model, or 'module:attr')")


def build_reward_funcs(
    names: Sequence[str],
    kwargs: Mapping[str, Mapping[str, Any]],
    judge: Callable[[], Any],
    answerer: Callable[[], Any] = _no_answerer,
) -> list[RewardFunc]:
    """One reward function per name, in order; `judge()` / `answerer()` are called only if a factory needs one."""
    check_rewards(names, kwargs)
    funcs: list[RewardFunc] = []
    for name in names:
        factory = reward_factory(name)
        options = dict(kwargs.get(name, {}))
        for parameter, provide in ((JUDGE_PARAMETER, judge), (ANSWERER_PARAMETER, answerer)):
            if wants(factory, parameter) and parameter not in options:
                options[parameter] = provide()
        _bind(name, factory, options, partial=False)
        func = factory(**options)
        if not callable(func):
            raise ConfigError(f"reward {name!r}: its factory returned {func!r}, not a reward function")
        funcs.append(func)
    from trl.trainer.utils import get_callable_name  # the name TRL logs a reward under

    logged = [get_callable_name(f) for f in funcs]
    clash = sorted({n for n in logged if logged.count(n) > 1})
    if clash:
        raise ConfigError(
            f"reward_funcs: two rewards log as 'rewards/{clash[0]}/mean'; give one a distinct __name__"
        )
    return funcs

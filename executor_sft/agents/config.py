"""Pipeline configuration: budgets, roles, per-role protocol and sampling, prompts.

Rollout and eval YAML files map onto `PipelineConfig` one to one, e.g.

    max_rounds: 4          # T
    max_parallel: 3        # P
    max_turns: 3           # K
    executor_roles: [teacher, student]
    driver: teacher
    roles:
      student: {protocol: native, sampling: {temperature: 0.7, enable_thinking: false}}
      backbone: {sampling: {max_tokens: 512}}
    prompts: {answerer: "file:prompts/my_answerer.md"}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from executor_sft.agents.prompting import Prompts
from executor_sft.agents.settings import PARALLEL_CALLS, ExecutorSettings, check_tools
from executor_sft.agents.tools import DEFAULT_TOOLS
from executor_sft.llm.base import SamplingParams
from executor_sft.schema import Role


class WrittenSampling(BaseModel):
    """A config with a `sampling` field whose written keys override a model's sampling defaults.

    A `sampling:` mapping in YAML records which keys it wrote; `sampling_over(defaults)` takes
    those keys from it and every other key from the model's `ChatModelConfig` sampling fields, so
    writing `{max_tokens: 512}` does not silently reset the model's temperature."""

    _sampling_keys: frozenset[str] | None = PrivateAttr(default=None)
    """The `sampling` keys a config wrote (None: all of them, e.g. a `SamplingParams` object)."""

    @model_validator(mode="wrap")
    @classmethod
    def _explicit_sampling(cls, data: Any, handler: Any) -> Any:
        model = handler(data)
        if isinstance(data, dict) and isinstance(data.get("sampling"), dict):
            model._sampling_keys = frozenset(data["sampling"])
        return model

    def sampling_over(self, defaults: SamplingParams) -> SamplingParams | None:
        """This config's sampling over a model's defaults: the keys the config wrote win, the rest
        come from `defaults` (None when it sets no sampling: the model's defaults apply)."""
        sampling = getattr(self, "sampling", None)
        if sampling is None:
            return None
        keys = self._sampling_keys
        if keys is None:
            return sampling
        return dataclasses.replace(defaults, **{k: getattr(sampling, k) for k in keys})

    def with_sampling_over(self, defaults: SamplingParams):
        """A copy whose `sampling` is `sampling_over(defaults)` (self when nothing changes)."""
        merged = self.sampling_over(defaults)
        if merged is getattr(self, "sampling", None):
            return self
        return self.model_copy(update={"sampling": merged})


class RoleConfig(WrittenSampling):
    """Settings for one role; `None` budget fields fall back to the pipeline's."""

    model_config = ConfigDict(extra="forbid")

    protocol: Literal["native", "tag"] = "native"
    sampling: SamplingParams | None = None
    """None: the model's own defaults (its `ChatModelConfig` sampling fields). Set in a collection or
    evaluation config, the keys written here override those defaults and the others keep the
    model's values (`PipelineConfig.with_model_sampling`); a `SamplingParams` object replaces them."""
    max_turns: int | None = Field(default=None, ge=1)
    max_searches: int | None = Field(default=None, ge=0)
    top_k: int | None = Field(default=None, ge=1)


OutcomeMode = Literal["substitute", "replay"]


class OutcomeConfig(BaseModel):
    """How a shadow or counterfactual run gets its outcome (docs/rollout.md, "Collection and outcome modes").

    `substitute`: the answerer is re-run with the run's report in place of the driver's at its
    position, other reports unchanged (one answerer call). `replay`: the backbone is re-run
    from the run's round with its report in place of the driver's, later rounds' sub-queries
    are executed by the driver, and the answerer answers from that replayed trajectory.
    """

    model_config = ConfigDict(extra="forbid")

    mode: OutcomeMode = "substitute"


class CounterfactualConfig(BaseModel):
    """Re-run correct multi-search teacher runs with a smaller search budget (docs/rollout.md, "Counterfactual semantics")."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    role: str = Role.TEACHER
    """Executor role whose runs are re-run (the re-run uses this role's model and settings)."""
    min_searches: int = Field(default=2, ge=1)
    max_searches: int = Field(default=1, ge=0)
    require_judge: bool | None = None
    """Whether "correct" needs judge == True; None means: only when a judge is configured."""


def _default_outcome(outcome: OutcomeConfig) -> bool:
    return outcome.mode == "substitute"


def _default_tools(tools: list[str]) -> bool:
    return tuple(tools) == DEFAULT_TOOLS


def _default_parallel_calls(n: int) -> bool:
    return n == PARALLEL_CALLS


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_rounds: int = Field(default=4, ge=1, description="T: backbone rounds of dispatch")
    max_parallel: int = Field(default=3, ge=1, description="P: sub-queries per round")
    max_turns: int = Field(default=3, ge=1, description="K: executor assistant turns")
    max_searches: int | None = Field(default=None, ge=0, description="executor search cap (<= K-1)")
    top_k: int = Field(default=3, ge=1, description="passages per search")
    executor_roles: list[str] = Field(default_factory=lambda: [Role.TEACHER, Role.STUDENT], min_length=1)
    driver: str = Role.TEACHER
    roles: dict[str, RoleConfig] = Field(default_factory=dict)
    prompts: Prompts = Field(default_factory=Prompts)
    tools: list[str] = Field(default_factory=lambda: list(DEFAULT_TOOLS), exclude_if=_default_tools)
    """The executor's tools, offered on every turn: registered names (`agents.tools.TOOLS`) or
    `package.module:attr` (docs/architecture.md, "An executor tool"). Left out of dumps when it
    is the default, as `outcome` is."""
    parallel_tool_calls: int = Field(default=PARALLEL_CALLS, ge=1, exclude_if=_default_parallel_calls)
    """Tool calls of one executor turn that run, concurrently (WideSeek-R1: 5); calls past it are
    answered with a correction. Left out of dumps when it is the default."""
    max_concurrent_executors: int | None = Field(default=None, ge=1, exclude_if=lambda value: value is None)
    """At most this many executor runs in flight at once across every episode of the process
    (`agents.dispatch`); None: only the models' own `max_concurrency` limits them."""
    label_outcomes: bool = True
    """Give every non-driver run its own outcome (by `outcome.mode`; substitution: one answerer call each)."""
    outcome: OutcomeConfig = Field(default_factory=OutcomeConfig, exclude_if=_default_outcome)
    """Outcome mode of shadow and counterfactual runs; left out of dumps (episode `config`
    records) when it is the default, so default-mode records carry no `outcome` key."""

    @model_validator(mode="after")
    def _check(self) -> PipelineConfig:
        if self.driver not in self.executor_roles:
            raise ValueError(f"driver {self.driver!r} is not one of executor_roles {self.executor_roles}")
        if len(set(self.executor_roles)) != len(self.executor_roles):
            raise ValueError(f"executor_roles has duplicates: {self.executor_roles}")
        reserved = {Role.BACKBONE, Role.ANSWERER, Role.JUDGE, Role.SINGLE_AGENT} & set(self.executor_roles)
        if reserved:
            raise ValueError(f"executor_roles may not use reserved role names {sorted(reserved)}")
        for name in self.executor_roles:
            turns, searches = self.budget(name)
            if searches is not None and searches > turns - 1:
                raise ValueError(
                    f"role {name!r}: max_searches={searches} exceeds max_turns - 1 = {turns - 1}"
                )
            check_tools(self.tools, self.role(name).protocol)
        return self

    def for_driver(self, driver: str) -> PipelineConfig:
        """This config with `driver` as the only executor role (an episode of separate collection)."""
        return self.model_copy(update={"executor_roles": [driver], "driver": driver})

    def with_model_sampling(self, defaults: Mapping[str, SamplingParams]) -> PipelineConfig:
        """This config with each role's `sampling` merged over its model's sampling defaults
        (`models.<role>`: temperature, top_p, max_tokens, seed, stop, enable_thinking): keys under
        `roles.<role>.sampling` win, the model's fill the rest. Collection and evaluation configs
        apply it on load, so no `models.<role>` sampling field is silently dropped."""
        roles = {}
        for name, role in self.roles.items():
            roles[name] = role.with_sampling_over(defaults[name]) if name in defaults else role
        return self.model_copy(update={"roles": roles})

    def role(self, name: str) -> RoleConfig:
        return self.roles.get(name) or RoleConfig()

    def sampling_for(self, name: str) -> SamplingParams | None:
        """A role's sampling override (None: the model's own defaults)."""
        role = self.roles.get(name)
        return role.sampling if role is not None else None

    def budget(self, name: str) -> tuple[int, int | None]:
        """(max_turns, max_searches) for an executor role, role settings over pipeline settings."""
        role = self.roles.get(name)
        if role is None:
            return self.max_turns, self.max_searches
        turns = role.max_turns if role.max_turns is not None else self.max_turns
        searches = role.max_searches if role.max_searches is not None else self.max_searches
        return turns, searches

    def executor_settings(self, name: str) -> ExecutorSettings:
        """The settings an executor role runs with: role settings over pipeline settings."""
        role = self.roles.get(name)
        turns, searches = self.budget(name)
        return ExecutorSettings(
            max_turns=turns,
            max_searches=searches,
            top_k=role.top_k if role is not None and role.top_k is not None else self.top_k,
            protocol=role.protocol if role is not None else "native",
            sampling=role.sampling if role is not None else None,
            prompts=self.prompts,
            tools=tuple(self.tools),
            parallel_calls=self.parallel_tool_calls,
        )

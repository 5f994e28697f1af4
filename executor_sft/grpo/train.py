"""GRPO for the executor with TRL's GRPOTrainer: multi-turn search rollouts, named weighted rewards.

`recipes/grpo_executor.py` parses (GRPOScriptArguments, GRPOConfig, ChatModelConfig) with TrlParser
and calls `run_grpo`; `build_grpo_trainer` is the same minus `train()` (tests and notebooks use
it to add callbacks or a trainer subclass).

What TRL does for us (trl 1.16): `environment_factory` gives each rollout its own
`SearchEnvironment`; its `search` method is the tool; TRL parses `<tool_call>` blocks with the
tokenizer's response schema, runs the tool, appends the tool turn and generates again, up to
`max_tool_calling_iterations` times; the tool-result tokens get `tool_mask = 0`, so the loss
(`completion_mask * tool_mask`) never trains on retrieved passages. Generation runs on
transformers, or vLLM in `colocate`/`server` mode (`use_vllm`, `vllm_mode`). The rewards are
`reward_funcs` (names in `REWARDS` or `module:attr` factories) weighted by TRL's own
`GRPOConfig.reward_weights`; TRL sums them per completion.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any

from executor_sft.errors import ConfigError
from executor_sft.grpo.arguments import (
    ExecutorDataArguments,
    load_prompt_dataset,
    load_retriever_from_args,
    parse_mapping,
    validate_model,
)
from executor_sft.grpo.card import GRPO_STAGE
from executor_sft.grpo.environment import SearchEnvironmentFactory
from executor_sft.grpo.reward_funcs import build_reward_funcs, check_reward_weights, check_rewards
from executor_sft.grpo.rewards import JudgeFn
from executor_sft.grpo.stage import build_stage_trainer, run_stage, steps_text
from executor_sft.registry import import_path
from executor_sft.retrieval.base import Retriever

GRPO_SETTINGS = (
    "learning_rate",
    "max_steps",
    "num_train_epochs",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_generations",
    "max_completion_length",
    "temperature",
    "beta",
    "loss_type",
    "reward_weights",
    "max_tool_calling_iterations",
)
"""The training arguments the model card records."""


@dataclass
class GRPOScriptArguments(ExecutorDataArguments):
    """GRPO's options that are not TRL's: the prompts and retrieval (`ExecutorDataArguments`), the rewards.

    `reward_funcs` names the rewards (their weights are `GRPOConfig.reward_weights`),
    `reward_kwargs` maps a reward's name to its factory's keyword arguments. `judge` (for
    `clp_judge`, `outcome_judge`) is 'module:attr', or a `ChatModelConfig` mapping of the judge model
    (an `LLMJudge` over it, verdicts cached in `judge_cache`). `answerer` (for the outcome
    rewards) is the fixed answerer: 'module:attr', `{factory: 'module:attr', ...}`, or a
    `ChatModelConfig` mapping, as in collection.
    """

    reward_funcs: list[str] = field(
        default_factory=lambda: ["clp_em"],
        metadata={
            "help": "Rewards, summed with GRPOConfig.reward_weights: outcome, outcome_judge (the system's final "
            "answer with the rollout's report substituted, on the gold answers; need `answerer`), clp_em, clp_f1, "
            "clp_judge (CLP over EM, F1 or a judge verdict against the teacher's answer) or 'module:attr' "
            "factories of your own."
        },
    )
    reward_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "Reward name -> keyword arguments of its factory (YAML/JSON), e.g. '{clp_em: {eps: 0.15}}'."
        },
    )
    judge: dict | str | None = field(
        default=None,
        metadata={
            "help": "For clp_judge: 'module:attr' (a judge(question, golden, prediction) callable or a zero-arg "
            "factory of one), or a ChatModelConfig mapping (YAML/JSON) of an OpenAI-compatible judge model."
        },
    )
    judge_cache: str | None = field(default=None, metadata={"help": "JSONL verdict cache for the LLM judge."})
    answerer: dict | str | None = field(
        default=None,
        metadata={
            "help": "For outcome / outcome_judge, the fixed answerer: 'module:attr' (a chat model or a zero-arg "
            "factory of one), a mapping {factory: 'module:attr', ...its keyword arguments}, or a ChatModelConfig "
            "mapping (YAML/JSON) of the answerer model, as in collection."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.judge = _model_spec(self.judge, "judge")
        self.answerer = _model_spec(self.answerer, "answerer")
        self.reward_kwargs = parse_mapping(self.reward_kwargs, "reward_kwargs") or {}
        check_rewards(self.reward_funcs, self.reward_kwargs)


def _model_spec(value: Any, name: str) -> Any:
    """'module:attr' stays text; YAML/JSON text becomes a mapping; a model mapping is checked now."""
    from executor_sft.llm.config import ChatModelConfig

    if isinstance(value, str):
        parsed = parse_mapping(value, name)
        value = parsed if isinstance(parsed, dict) else value
    if isinstance(value, dict) and "factory" not in value:
        try:
            validate_model(ChatModelConfig, value, name)
        except ValueError as exc:
            raise ValueError(f"GRPOScriptArguments: {exc}") from None
    return value


def load_judge(spec: str) -> JudgeFn:
    """'module:attr' -> the judge; a class or zero-arg factory is called once to build it."""
    if ":" not in spec:
        raise ConfigError(f"judge {spec!r}: expected 'module:attr'")
    obj: Any = import_path(spec, "judge")
    return obj() if _zero_arg_factory(obj) else obj


def build_judge(args: GRPOScriptArguments) -> Any:
    """The judge the arguments name: `judge` ('module:attr'), or an LLMJudge over the `judge` model."""
    if isinstance(args.judge, str):
        return load_judge(args.judge)
    if isinstance(args.judge, dict):
        from executor_sft.llm.config import ChatModelConfig, build_chat_model
        from executor_sft.metrics.judge import LLMJudge

        chat = build_chat_model(ChatModelConfig.model_validate(args.judge))
        return LLMJudge(chat, cache_path=args.judge_cache)
    raise ConfigError(
        "reward clp_judge needs `judge` ('module:attr' or a model mapping such as '{model: Qwen/Qwen3-32B}'), "
        "or a judge passed to build_grpo_trainer"
    )


def _zero_arg_factory(obj: Any) -> bool:
    if isinstance(obj, type):
        return True
    try:
        return callable(obj) and not inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False


def build_answerer(args: GRPOScriptArguments) -> Any:
    """The fixed answerer the arguments name: 'module:attr', {factory: 'module:attr', ...}, or a model mapping."""
    if args.answerer is None:
        raise ConfigError(
            "the outcome rewards need `answerer`: the fixed answerer's model mapping (as in collection, e.g. "
            "'{model: Qwen/Qwen3-32B}') or 'module:attr'"
        )
    return build_chat_from_spec(args.answerer, "answerer")


def build_chat_from_spec(spec: Any, what: str) -> Any:
    """A chat model from 'module:attr' (a model or a zero-arg factory of one), a mapping
    {factory: 'module:attr', ...its keyword arguments}, or a `ChatModelConfig` mapping."""
    if isinstance(spec, str):
        if ":" not in spec:
            raise ConfigError(f"{what} {spec!r}: expected 'module:attr' or a model mapping")
        obj: Any = import_path(spec, what)
        return obj() if not callable(getattr(obj, "chat", None)) and _zero_arg_factory(obj) else obj
    if isinstance(spec, dict) and "factory" in spec:
        options = {k: v for k, v in spec.items() if k != "factory"}
        factory = import_path(str(spec["factory"]), f"{what} factory")
        try:
            inspect.signature(factory).bind(**options)
        except TypeError as exc:
            raise ConfigError(f"{what}: {spec['factory']}: {exc}") from None
        except ValueError:
            pass
        return factory(**options)
    if isinstance(spec, dict):
        from executor_sft.llm.config import ChatModelConfig, build_chat_model

        return build_chat_model(ChatModelConfig.model_validate(spec))
    raise ConfigError(
        f"{what}: expected a model mapping such as '{{model: Qwen/Qwen3-32B}}' or 'module:attr'"
    )


def check_reward_columns(rewards: list, dataset: Any, training_args: Any) -> None:
    """Every reward finds the dataset columns it reads, and accepts the training arguments."""
    have = set(getattr(dataset, "column_names", None) or [])
    for func in rewards:
        missing = [c for c in getattr(func, "columns", ()) if c not in have]
        if missing:
            raise ConfigError(
                f"reward {getattr(func, '__name__', func)!r} needs the dataset columns {missing}; build the rows "
                "from rollouts (`rollouts:`, or recipes/build_grpo_data.py)"
            )
        check = getattr(func, "check_training_args", None)
        if callable(check):
            check(training_args)


def build_grpo_trainer(
    script_args: GRPOScriptArguments,
    training_args,
    model_args,
    *,
    model: Any = None,
    processing_class: Any = None,
    train_dataset: Any = None,
    retriever: Retriever | None = None,
    judge: JudgeFn | Any = None,
    answerer: Any = None,
    trainer_cls: type | None = None,
    callbacks: list | None = None,
):
    """A ready GRPOTrainer: dataset, search environment, the weighted rewards, optional LoRA.

    `model`/`processing_class`/`train_dataset`/`retriever`/`judge`/`answerer` override what the arguments
    would load (e.g. an in-memory model); `trainer_cls` may be a GRPOTrainer subclass. The
    rewards are built (and checked against `reward_weights`) before anything else loads.
    """
    from trl import GRPOTrainer

    check_reward_weights(script_args.reward_funcs, training_args.reward_weights)
    configured_judge = functools.cache(lambda: judge if judge is not None else build_judge(script_args))
    configured_answerer = functools.cache(
        lambda: answerer if answerer is not None else build_answerer(script_args)
    )
    rewards = build_reward_funcs(
        script_args.reward_funcs, script_args.reward_kwargs, configured_judge, configured_answerer
    )
    if script_args.max_searches < 0 or script_args.retriever_top_k < 1:
        raise ConfigError(
            f"need max_searches >= 0 and top_k >= 1, got {script_args.max_searches}, {script_args.retriever_top_k}"
        )
    dataset = train_dataset if train_dataset is not None else load_prompt_dataset(script_args)
    check_reward_columns(rewards, dataset, training_args)
    retriever = retriever if retriever is not None else load_retriever_from_args(script_args)
    factory = SearchEnvironmentFactory(
        retriever,
        top_k=script_args.retriever_top_k,
        max_searches=script_args.max_searches,
        tools=tuple(script_args.tools),
    )
    return build_stage_trainer(
        trainer_cls or GRPOTrainer,
        script_args,
        training_args,
        model_args,
        model=model,
        processing_class=processing_class,
        reward_funcs=rewards,
        train_dataset=dataset,
        environment_factory=factory,
        callbacks=callbacks,
    )


def run_grpo(script_args: GRPOScriptArguments, training_args, model_args, **overrides: Any):
    """Build the trainer, train (resuming the last complete checkpoint), save to `output_dir`;
    returns the trainer, or None when `output_dir` already holds a finished run."""
    return run_stage(
        build_grpo_trainer,
        GRPO_STAGE,
        script_args,
        training_args,
        model_args,
        settings=GRPO_SETTINGS,
        outcome=_grpo_outcome,
        extra_config={
            "reward_funcs": script_args.reward_funcs,
            "reward_kwargs": script_args.reward_kwargs,
            "tools": script_args.tools,
        },
        overrides=overrides,
    )


def _grpo_outcome(trainer: Any) -> list[str]:
    """The closing line (printed) and the card's outcome: the last logged step's rewards and executor metrics."""
    logs = [h for h in trainer.state.log_history if "reward" in h]
    if not logs:
        return []
    last = logs[-1]
    summary = ", ".join(
        f"{k}={last[k]:.3f}"
        for k in (
            "reward",
            *sorted(k for k in last if k.startswith("rewards/") and k.endswith("/mean")),
            "executor/correct",
            "executor/tool_calls",
            "executor/format_ok",
            "outcome/correct",
        )
        if k in last
    )
    trainer.accelerator.print(f"GRPO done: {steps_text(trainer.state.global_step)}; last log: {summary}")
    return [f"last logged step: {summary}"] if summary else []

"""What the post-SFT stages (GRPO, distillation) share: where the prompts and the passages come from.

`ExecutorDataArguments` is a `trl.ScriptArguments` with the prompt source (GRPO rows, rollouts
or a questions file), the executor prompt and budget, and the retriever; each stage's own
arguments extend it. `load_prompt_dataset` builds the prompts one way for both stages, so the
executor reads the same system prompt, sub-query and tool turns in each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from trl import ScriptArguments

from executor_sft.errors import ConfigError
from executor_sft.grpo.data import (
    grpo_examples_from_questions,
    grpo_examples_from_rollouts,
    load_jsonl,
    to_dataset,
)
from executor_sft.retrieval.base import Retriever
from executor_sft.retrieval.config import RetrieverConfig


@dataclass
class ExecutorDataArguments(ScriptArguments):
    """Prompts and retrieval of a post-SFT stage.

    Exactly one prompt source: `dataset_name` (rows from recipes/build_grpo_data.py; `--dataset`
    is the same flag), `rollouts` (rows built on the fly from verified teacher reports) or
    `questions` (any questions JSONL, e.g. a sub-query split: each question is one sub-query;
    `hf://<repo>` reads a Hub dataset).
    `retriever` is a `RetrieverConfig` mapping, as in collection and evaluation configs
    (`{index: DIR, kind: bm25, k: 3}`): its `k` is the passages per search. On the command line
    the mappings take YAML or JSON text: `--retriever '{index: indexes/wiki, k: 3}'`.
    """

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "GRPO rows (JSONL from recipes/build_grpo_data.py): prompt + reference.",
            "aliases": ["--dataset"],
        },
    )
    rollouts: list[str] | None = field(
        default=None, metadata={"help": "Build the rows on the fly from these rollouts.jsonl files instead."}
    )
    questions: str | None = field(
        default=None,
        metadata={
            "help": "Or a questions JSONL (e.g. a sub-query split): each question is one executor prompt."
        },
    )
    roles: list[str] = field(
        default_factory=lambda: ["teacher"],
        metadata={"help": "Roles whose verified reports become references."},
    )
    require_judge: bool = field(
        default=True, metadata={"help": "A reference needs EM == 1 and judge True (False: EM only)."}
    )
    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "Executor system prompt (text or file:PATH) when building rows; default: the one recorded in "
            "each run (rollouts) or the packaged one (questions)."
        },
    )
    max_examples: int | None = field(default=None, metadata={"help": "Use at most this many rows (first N)."})
    fresh: bool = field(
        default=False,
        metadata={
            "help": "Train from the start even if output_dir holds a finished run or checkpoints "
            "(by default a finished run is reported, not retrained, and the last complete checkpoint resumes)."
        },
    )
    retriever: dict | str | None = field(
        default=None,
        metadata={
            "help": "RetrieverConfig mapping (YAML/JSON): index directory (recipes/build_index.py) or url "
            "(Search-R1 wire format), kind, k (passages per search; the trainer's top_k is sampling), cache."
        },
    )
    max_searches: int = field(
        default=2, metadata={"help": "Searches per rollout; further calls get a 'report now' notice."}
    )
    tools: list[str] = field(
        default_factory=lambda: ["search"],
        metadata={
            "help": "The executor's tools, as the collection config's pipeline.tools: 'search' or 'search_many', "
            "plus optionally 'open_document' (docs/agents.md, 'Parallel tool calls')."
        },
    )

    def __post_init__(self) -> None:
        self.retriever = parse_mapping(self.retriever, "retriever") or {}
        # Check the fields now; the source (index or url) may come later as a retriever object.
        has_source = self.retriever.get("index") is not None or self.retriever.get("url") is not None
        validate_model(
            RetrieverConfig, self.retriever if has_source else {**self.retriever, "index": ""}, "retriever"
        )

    @property
    def retriever_top_k(self) -> int:
        """Passages per search: `retriever.k` (read-only; set `retriever.k`)."""
        return int(self.retriever.get("k", RetrieverConfig.model_fields["k"].default))

    def retriever_config(self) -> RetrieverConfig:
        """The `retriever` mapping as a `RetrieverConfig` (needs `index` or `url`)."""
        return validate_model(RetrieverConfig, self.retriever, "retriever")


MAPPING_EXAMPLES = {
    "retriever": "{index: indexes/wiki, k: 3}",
    "reward_kwargs": "{clp_em: {eps: 0.15}}",
}


def parse_mapping(value: Any, name: str) -> Any:
    """A mapping from YAML/JSON text (the command line); other values pass through."""
    if not isinstance(value, str):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ValueError(f"{name}: not YAML/JSON ({exc})") from None
    if name in MAPPING_EXAMPLES and not isinstance(parsed, dict | None):
        raise ValueError(f"{name}: expected a mapping such as '{MAPPING_EXAMPLES[name]}', got {value!r}")
    return parsed


def validate_model(cls: Any, data: dict[str, Any], name: str) -> Any:
    """`cls.model_validate(data)`, its problems as one line naming the fields (`name.field`)."""
    from pydantic import ValidationError

    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in (name, *err['loc']))}': {err['msg']}" for err in exc.errors()
        )
        raise ValueError(f"{problems}") from None


def load_prompt_dataset(args: ExecutorDataArguments):
    """The stage's prompts as a `datasets.Dataset`, from the one source the arguments name."""
    sources = {"dataset_name": args.dataset_name, "rollouts": args.rollouts, "questions": args.questions}
    given = [k for k, v in sources.items() if v is not None]
    if len(given) != 1:
        raise ConfigError(
            "give exactly one of `dataset_name` (GRPO rows JSONL), `rollouts` (rollouts.jsonl files) or "
            f"`questions` (a questions JSONL); got {given or 'none'}"
        )
    files = {"dataset_name": [args.dataset_name], "rollouts": args.rollouts or []}
    if args.questions is not None and not str(args.questions).startswith("hf://"):
        files["questions"] = [args.questions]
    for name, paths in files.items():
        missing = [p for p in paths if p is not None and not Path(p).is_file()]
        if missing:
            raise ConfigError(f"{name}: {missing[0]}: no such file")
    if args.dataset_name is not None:
        rows = load_jsonl(args.dataset_name)
    elif args.rollouts is not None:
        rows = grpo_examples_from_rollouts(
            args.rollouts,
            roles=tuple(args.roles),
            require_judge=args.require_judge,
            system_prompt=args.system_prompt,
            top_k=args.retriever_top_k,
            max_searches=args.max_searches,
        )
    else:
        rows = grpo_examples_from_questions(
            args.questions, args.system_prompt, top_k=args.retriever_top_k, max_searches=args.max_searches
        )
    if args.max_examples is not None:
        rows = rows[: args.max_examples]
    return to_dataset(rows)


def load_retriever_from_args(args: ExecutorDataArguments) -> Retriever:
    from executor_sft.retrieval.config import build_retriever

    return build_retriever(args.retriever_config())

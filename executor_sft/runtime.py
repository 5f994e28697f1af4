"""`Runtime`: the models, retriever and judge that a collection or an evaluation runs its episodes with.

Built once per run (in this process, or once per Ray actor), from the config or from objects
a caller hands over (scripted policies, a shared server), so collection and evaluation build
them in one place; their configs check, with `check_roles`, that every role has a model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from executor_sft.llm.base import ChatModel
from executor_sft.llm.config import ChatModelConfig
from executor_sft.llm.pool import ModelPool
from executor_sft.llm.request_cache import RequestCache
from executor_sft.metrics.judge import LLMJudge
from executor_sft.retrieval.base import Retriever
from executor_sft.retrieval.config import RetrieverConfig, build_retriever
from executor_sft.schema import Role

ModelsFactory = Callable[[], Mapping[str, ChatModel]]
"""Builds a role -> model map where the runtime is built (picklable for Ray actors)."""
RetrieverFactory = Callable[[], Retriever]


def check_roles(models: Mapping[str, object], roles: Sequence[str], note: str = "") -> None:
    """Every role in `roles` has a model in `models`: the one check, run by the collection and
    evaluation configs' validators before anything loads (`note` follows the missing roles)."""
    missing = [r for r in roles if r not in models]
    if missing:
        raise ValueError(f"models: no model for role(s) {missing}{note}; got {sorted(models)}")


@dataclass
class Runtime:
    """What every episode of one run uses: a chat model per role, the retriever (None: a mode
    without retrieval), the judge (None: not configured) and the request cache that answers the
    models' repeated greedy requests while the run is inside `cached_calls()` (None: off)."""

    models: dict[str, ChatModel]
    retriever: Retriever | None
    judge: LLMJudge | None = None
    cache: RequestCache | None = None

    def cached_calls(self) -> contextlib.AbstractContextManager:
        """The block the engines run their episodes in: `call_model` consults `cache` there."""
        return self.cache.in_use() if self.cache is not None else contextlib.nullcontext()

    @classmethod
    def build(
        cls,
        model_configs: Mapping[str, ChatModelConfig],
        retriever_config: RetrieverConfig | None,
        *,
        llm_cache: Path | None = None,
        judge_cache: str | Path | None = None,
        judge_prompt: str | None = None,
        models: Mapping[str, ChatModel] | ModelsFactory | None = None,
        retriever: Retriever | RetrieverFactory | None = None,
        judge: LLMJudge | None = None,
        pool: ModelPool | None = None,
    ) -> Runtime:
        """The config's models (`model_configs`, with the request cache over `llm_cache`) and retriever
        (`retriever_config`), or the objects (or factories) given instead. The config has checked
        that every role has a model (`check_roles`). A `judge` model gets an `LLMJudge` whose
        verdicts persist in `judge_cache`."""
        cache = None
        if models is None:
            built = (pool or ModelPool()).build(model_configs)
            if llm_cache is not None:  # the judge's calls are not `call_model`'s: it keeps its own verdicts
                keys = {role: cfg.identity() for role, cfg in model_configs.items()}
                cache = RequestCache(llm_cache).cover(built, skip_roles=(Role.JUDGE,), model_keys=keys)
        else:
            built = dict(models() if callable(models) else models)
        if callable(retriever):
            retriever = retriever()
        if retriever is None and retriever_config is not None:
            retriever = build_retriever(retriever_config)
        if judge is None and Role.JUDGE in built:
            if judge_cache is not None:
                Path(judge_cache).parent.mkdir(parents=True, exist_ok=True)
            judge = LLMJudge(built[Role.JUDGE], prompt=judge_prompt, cache_path=judge_cache)
        return cls(built, retriever, judge, cache)

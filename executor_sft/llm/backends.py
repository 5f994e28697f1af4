"""The built-in model backends: one config class and one builder each, registered in `BACKENDS`.

Builders import their heavy dependencies (torch, vLLM) only when they run, so importing this
module loads none of them. A user's backend registers the same way (docs/architecture.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from executor_sft.llm.base import ChatModel
from executor_sft.llm.config import BACKENDS, Backend, ChatModelConfig
from executor_sft.llm.oracle import DEFAULT_NAME as ORACLE_MODEL
from executor_sft.llm.oracle import OracleMode
from executor_sft.llm.prefix_cache import DEFAULT_PREFIX_CACHE_TOKENS
from executor_sft.llm.sources import source_problem
from executor_sft.urls import check_url


class OpenAIConfig(ChatModelConfig):
    """An OpenAI-compatible endpoint (vLLM, SGLang, a hosted API, `executor_sft.llm.server`)."""

    backend: str = "openai"
    model: str
    """Served model name."""
    base_urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:8000/v1"])
    """One URL or several replicas of the model: sticky per executor run and episode, else least
    loaded (`executor_sft.llm.routing`)."""
    health_check_s: float = Field(0.0, ge=0)
    """Poll each replica's `/health` this often, taking a failing one out and putting it back when
    it answers again (0: no polling; a replica that failed is skipped for a few seconds)."""
    api_key_env: str | None = None
    max_concurrency: int = Field(32, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0)
    backoff_base_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(20.0, ge=0)
    pass_enable_thinking: bool = True
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """Request field for the token limit; OpenAI's reasoning models need max_completion_tokens."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    tokenizer: str | None = None
    """Path / alias of a tokenizer that counts tokens when an endpoint reports none, and names the
    vocabulary of returned token ids."""
    return_token_ids: bool = False
    """Ask the server for the sampled token ids (vLLM >= 0.10.2) and store them with each call."""

    identity_exclude: ClassVar[frozenset[str]] = frozenset(
        {"base_urls", "health_check_s", "api_key_env", "max_concurrency", "timeout_s", "max_retries"}
        | {"backoff_base_s", "backoff_max_s", "return_token_ids"}
    )

    @field_validator("base_urls", mode="before")
    @classmethod
    def _one_url(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        return [check_url(url) for url in value]

    def preflight(self) -> list[tuple[str, str]]:
        problems = super().preflight()
        if self.api_key_env and not os.environ.get(self.api_key_env):
            problems.append(
                (
                    "api_key_env",
                    f"${self.api_key_env} is not set; export it (keys are read from the environment only)",
                )
            )
        return problems + _tokenizer_problems(self.tokenizer)

    def endpoints(self) -> list[tuple[str, str]]:
        return [("base_urls", f"{url.rstrip('/')}/models") for url in self.base_urls]


class LocalWeights(ChatModelConfig):
    """A backend that loads `model` (and an optional `tokenizer`) in this process."""

    tokenizer: str | None = None
    """Path / alias of a tokenizer that replaces the model's own."""

    def preflight(self) -> list[tuple[str, str]]:
        problems = super().preflight()
        if problem := source_problem(self.model):
            problems.append(("model", problem))
        return problems + _tokenizer_problems(self.tokenizer)


def _tokenizer_problems(tokenizer: str | None) -> list[tuple[str, str]]:
    """A configured tokenizer that cannot be loaded here, as a preflight problem."""
    problem = source_problem(tokenizer, "tokenizer") if tokenizer else None
    return [("tokenizer", problem)] if problem else []


class TransformersConfig(LocalWeights):
    """A Hugging Face model generating in this process (CPU or one GPU)."""

    backend: str = "transformers"
    model: str
    """Path, hub id or offline alias (`offline:tiny-qwen3`)."""
    chat_template: str | None = None
    """Path to a Jinja chat template, or "chatml_tools" / "qwen3_executor" (this project's)."""
    dtype: str = "float32"
    device: str | None = None
    max_batch_size: int = Field(8, ge=1)
    """Most concurrent greedy calls merged into one generate()."""
    prefix_cache_tokens: int = Field(DEFAULT_PREFIX_CACHE_TOKENS, ge=0)
    """Most tokens of keys and values kept for reuse across calls (0 = off); see docs/llm.md."""

    identity_exclude: ClassVar[frozenset[str]] = frozenset(
        {"device", "max_batch_size", "prefix_cache_tokens"}
    )


class VLLMConfig(LocalWeights):
    """A vLLM engine in this process (the `gpu` extra)."""

    backend: str = "vllm"
    model: str
    """Path, hub id or offline alias."""
    chat_template: str | None = None
    """Path to a Jinja chat template, or "chatml_tools" / "qwen3_executor" (this project's)."""
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of vLLM's `AsyncEngineArgs` (gpu_memory_utilization, max_model_len, ...)."""


class OracleConfig(ChatModelConfig):
    """A backbone that dispatches gold decompositions (`executor_sft.llm.oracle`)."""

    backend: str = "oracle"
    model: str = ORACLE_MODEL
    questions: str
    """The questions file whose `decomposition` fields it dispatches."""
    mode: OracleMode = "report"
    """Fill `#k` from the executor's report of hop k ("report") or from the gold answer of hop k
    ("gold")."""

    def preflight(self) -> list[tuple[str, str]]:
        problems = super().preflight()
        if not Path(self.questions).is_file():
            problems.append(
                ("questions", f"{self.questions}: no such file; give the questions file the run reads")
            )
        return problems


def template_text(spec: str | None) -> str | None:
    """The chat template `spec` names: this project's by name, else a Jinja file."""
    if spec is None:
        return None
    if spec == "chatml_tools":
        from executor_sft.llm.offline import chatml_tools_template

        return chatml_tools_template()
    if spec == "qwen3_executor":
        from executor_sft.llm.offline import qwen3_executor_template

        return qwen3_executor_template()
    return Path(spec).read_text(encoding="utf-8")


def load_tokenizer(spec: str | None) -> Any:
    """The tokenizer `spec` names (an offline alias, a path or a hub id); None when unset."""
    if not spec:
        return None
    if spec.startswith("offline:"):
        from executor_sft.llm.offline import load_offline_tokenizer

        return load_offline_tokenizer(spec)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec)


def build_openai(cfg: OpenAIConfig) -> ChatModel:
    from executor_sft.llm.openai_backend import OpenAIChatModel

    return OpenAIChatModel(
        cfg.model,
        cfg.base_urls,
        api_key_env=cfg.api_key_env,
        name=cfg.label(),
        max_concurrency=cfg.max_concurrency,
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
        backoff_base_s=cfg.backoff_base_s,
        backoff_max_s=cfg.backoff_max_s,
        health_check_s=cfg.health_check_s,
        sampling=cfg.sampling(),
        extra_body=cfg.extra_body,
        pass_enable_thinking=cfg.pass_enable_thinking,
        max_tokens_field=cfg.max_tokens_field,
        tokenizer=load_tokenizer(cfg.tokenizer),
        return_token_ids=cfg.return_token_ids,
    )


def _in_process_kwargs(cfg: TransformersConfig | VLLMConfig) -> dict[str, Any]:
    """What both in-process engines (transformers, vLLM) take from their config besides the model."""
    return {
        "tokenizer": load_tokenizer(cfg.tokenizer),
        "name": cfg.label(),
        "sampling": cfg.sampling(),
        "chat_template": template_text(cfg.chat_template),
    }


def build_transformers(cfg: TransformersConfig) -> ChatModel:
    from executor_sft.llm.transformers_backend import TransformersChatModel

    return TransformersChatModel(
        cfg.model,
        **_in_process_kwargs(cfg),
        dtype=cfg.dtype,
        device=cfg.device,
        max_batch_size=cfg.max_batch_size,
        prefix_cache_tokens=cfg.prefix_cache_tokens,
    )


def build_vllm(cfg: VLLMConfig) -> ChatModel:
    from executor_sft.llm.vllm_backend import VLLMChatModel

    return VLLMChatModel(cfg.model, **_in_process_kwargs(cfg), engine_kwargs=cfg.engine_kwargs)


def build_oracle(cfg: OracleConfig) -> ChatModel:
    from executor_sft.llm.oracle import OracleBackbone

    return OracleBackbone.from_file(cfg.questions, mode=cfg.mode, name=cfg.label())


BACKENDS.register("openai", Backend(OpenAIConfig, build_openai))
BACKENDS.register("transformers", Backend(TransformersConfig, build_transformers))
BACKENDS.register("vllm", Backend(VLLMConfig, build_vllm))
BACKENDS.register("oracle", Backend(OracleConfig, build_oracle))

"""One model role in a YAML config (`ModelConfig`) and the factory that builds its backend.

Unknown keys are errors (a typo like `temprature` must not silently fall back to a
default); pydantic's message names the field. The API key itself never appears in a
config: only the name of the environment variable that holds it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.llm.oracle import DEFAULT_NAME as ORACLE_MODEL


def _absent(value: Any) -> bool:
    return value is None


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    backend: Literal["openai", "transformers", "vllm", "oracle"] = "openai"
    model: str
    """Served model name (openai), or path / hub id / offline alias (transformers, vllm);
    optional for `oracle` (default "oracle-decomposition")."""
    name: str | None = None
    """Label recorded in episodes (default: `model`)."""

    # openai backend
    base_urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:8000/v1"])
    api_key_env: str | None = None
    max_concurrency: int = Field(32, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0)
    backoff_base_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(20.0, ge=0)
    pass_enable_thinking: bool = True
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """Request field for the token limit; OpenAI's reasoning models need max_completion_tokens."""
    tokenizer: str | None = None
    """Path / alias of a tokenizer: counts tokens when an endpoint reports none (openai), or
    replaces the model's own tokenizer (vllm)."""

    # sampling defaults
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(1024, ge=1)
    seed: int | None = None
    stop: list[str] | None = None
    enable_thinking: bool = False
    extra_body: dict[str, Any] = Field(default_factory=dict)

    # in-process backends
    chat_template: str | None = None
    """Path to a Jinja chat template, or "chatml_tools" for this project's template."""
    dtype: str = "float32"
    device: str | None = None
    max_batch_size: int = Field(8, ge=1)
    """transformers backend: most concurrent greedy calls merged into one generate()."""
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)

    # oracle backend (a backbone that dispatches gold decompositions: executor_sft.llm.oracle)
    questions: str | None = Field(None, exclude_if=_absent)
    """oracle: the questions file whose `decomposition` fields it dispatches."""
    mode: Literal["report", "gold"] | None = Field(None, exclude_if=_absent)
    """oracle: fill `#k` from the executor's report of hop k ("report", default) or from the
    gold answer of hop k ("gold")."""

    @model_validator(mode="before")
    @classmethod
    def _oracle_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("backend") == "oracle" and "model" not in data:
            data = {**data, "model": ORACLE_MODEL}
        return data

    @model_validator(mode="after")
    def _oracle_fields(self) -> ModelConfig:
        if self.backend == "oracle" and not self.questions:
            raise ValueError("backend 'oracle' needs `questions: <questions file with decompositions>`")
        if self.backend != "oracle" and (self.questions is not None or self.mode is not None):
            raise ValueError("`questions` and `mode` belong to backend 'oracle' only")
        return self

    @field_validator("base_urls", mode="before")
    @classmethod
    def _one_url(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed,
            stop=list(self.stop) if self.stop else None,
            enable_thinking=self.enable_thinking,
        )

    def label(self) -> str:
        return self.name or self.model


def _template_text(spec: str | None) -> str | None:
    if spec is None:
        return None
    if spec == "chatml_tools":
        from executor_sft.llm.offline import chatml_tools_template

        return chatml_tools_template()
    if spec == "qwen3_executor":
        from executor_sft.llm.offline import qwen3_executor_template

        return qwen3_executor_template()
    from pathlib import Path

    return Path(spec).read_text(encoding="utf-8")


def _load_tokenizer(spec: str) -> Any:
    if spec.startswith("offline:"):
        from executor_sft.llm.offline import load_offline_tokenizer

        return load_offline_tokenizer(spec)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec)


def build_chat_model(cfg: ModelConfig | dict[str, Any]) -> ChatModel:
    """The backend a config describes (imports heavy dependencies only when needed)."""
    if not isinstance(cfg, ModelConfig):
        cfg = ModelConfig.model_validate(cfg)
    if cfg.backend == "oracle":
        from executor_sft.llm.oracle import OracleBackbone

        assert cfg.questions is not None
        return OracleBackbone.from_file(cfg.questions, mode=cfg.mode or "report", name=cfg.label())
    if cfg.backend == "openai":
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
            sampling=cfg.sampling(),
            extra_body=cfg.extra_body,
            pass_enable_thinking=cfg.pass_enable_thinking,
            max_tokens_field=cfg.max_tokens_field,
            tokenizer=_load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None,
        )
    if cfg.backend == "transformers":
        from executor_sft.llm.transformers_backend import TransformersChatModel

        return TransformersChatModel(
            cfg.model,
            _load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None,
            name=cfg.label(),
            sampling=cfg.sampling(),
            chat_template=_template_text(cfg.chat_template),
            dtype=cfg.dtype,
            device=cfg.device,
            max_batch_size=cfg.max_batch_size,
        )
    from executor_sft.llm.vllm_backend import VLLMChatModel

    return VLLMChatModel(
        cfg.model,
        _load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None,
        name=cfg.label(),
        sampling=cfg.sampling(),
        chat_template=_template_text(cfg.chat_template),
        engine_kwargs=cfg.engine_kwargs,
    )

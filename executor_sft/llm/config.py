"""One model role in a YAML config (`ChatModelConfig`), the backend registry, and `build_chat_model`.

Each backend owns a config class (a `ChatModelConfig` subclass) and a builder; `BACKENDS` maps the
backend's name to that pair (`Backend`). Validating a mapping as `ChatModelConfig` reads its
`backend` (default "openai"), looks it up in `BACKENDS` (a registered name, or an import path
`package.module:attr` naming a `Backend`) and validates the mapping as that backend's class, so
a field of another backend is an error naming the field, as a typo like `temprature` is.
`ChatModelConfig(**fields)` dispatches the same way. The built-in backends are in
`executor_sft.llm.backends`; docs/architecture.md ("A model backend") adds one.

The request-cache identity of a model (`identity()`) is the dump of its own config minus the
fields its class declares in `identity_exclude` (endpoints, timeouts, placement: what cannot
change an answer). The API key itself never appears in a config: only the name of the
environment variable that holds it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from executor_sft.llm.base import ChatModel, SamplingParams
from executor_sft.registry import Registry

DEFAULT_BACKEND = "openai"


class ChatModelConfig(BaseModel):
    """The fields every backend shares; validating as this class picks the backend's own class."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), polymorphic_serialization=True)

    backend: str = DEFAULT_BACKEND
    """A name in `BACKENDS`, or `package.module:attr` naming a `Backend`."""
    model: str
    """What the backend serves or loads (a served model name, a path, a hub id, an alias)."""
    name: str | None = None
    """Label recorded in episodes (default: `model`)."""

    # sampling defaults (a role's `sampling` in the pipeline overrides them)
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(1024, ge=1)
    seed: int | None = None
    stop: list[str] | None = None
    enable_thinking: bool = False

    identity_exclude: ClassVar[frozenset[str]] = frozenset(
        {"temperature", "top_p", "max_tokens", "seed", "stop", "enable_thinking"}
    )
    """Fields left out of `identity()`, with those of the parent classes. Here the sampling
    defaults: each call's effective sampling enters the request key instead."""

    def __new__(cls, /, **data: Any) -> ChatModelConfig:
        if cls is ChatModelConfig and data:  # the backend's own class (its __init__ then runs on it)
            return cls.model_validate(data)
        return super().__new__(cls)

    @model_validator(mode="wrap")
    @classmethod
    def _backend_class(
        cls, data: Any, handler: ModelWrapValidatorHandler[ChatModelConfig]
    ) -> ChatModelConfig:
        if cls is not ChatModelConfig or not isinstance(data, dict):
            return handler(data)
        backend = data.get("backend", DEFAULT_BACKEND)
        if not isinstance(backend, str):
            raise ValueError(f"backend must be a name, got {backend!r}")
        config = BACKENDS.get(backend).config
        try:
            return config.model_validate(data)
        except ValidationError as exc:
            raise _name_backend(exc, backend, config) from None

    @model_validator(mode="after")
    def _backend_matches(self) -> ChatModelConfig:
        config = BACKENDS.get(self.backend).config
        if not isinstance(self, config):
            raise ValueError(
                f"backend {self.backend!r} is configured by {config.__name__}, not {type(self).__name__}"
            )
        return self

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

    def preflight(self) -> list[tuple[str, str]]:
        """What would stop this model at its first call, as (field, what to do) pairs, found
        without loading or calling anything (`executor_sft.preflight`). A backend of your own
        overrides it; its URLs go in `endpoints`."""
        return []

    def endpoints(self) -> list[tuple[str, str]]:
        """(field, URL) pairs that must answer an HTTP GET before a run starts."""
        return []

    @classmethod
    def identity_excluded(cls) -> frozenset[str]:
        """`identity_exclude` of this class and every parent class."""
        return frozenset().union(*(vars(c).get("identity_exclude", ()) for c in cls.__mro__))

    def identity(self) -> str:
        """This model's part of a request-cache key: its config, less what cannot change an answer."""
        return self.model_dump_json(exclude=set(self.identity_excluded()))


def _name_backend(exc: ValidationError, backend: str, config: type[ChatModelConfig]) -> ValidationError:
    """`exc`, with a key the backend's class does not declare said to be no field of that backend."""
    problems = exc.errors()
    if not any(err["type"] == "extra_forbidden" and len(err["loc"]) == 1 for err in problems):
        return exc
    fields = list(config.model_fields)
    errors: list[InitErrorDetails] = []
    for err in problems:
        message = err["msg"]
        if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
            message = f"not a field of backend {backend!r}; {_hint(str(err['loc'][0]), fields)}"
        kind = PydanticCustomError(err["type"], message)
        errors.append({"type": kind, "loc": err["loc"], "input": err["input"]})
    return ValidationError.from_exception_data(exc.title, errors)


def _hint(key: str, fields: list[str]) -> str:
    owners = [name for name in BACKENDS if key in BACKENDS.get(name).config.model_fields]
    if owners:
        return f"it belongs to backend {' / '.join(map(repr, owners))}"
    close = difflib.get_close_matches(key, fields, n=1)
    return f"did you mean {close[0]!r}?" if close else f"its fields: {', '.join(fields)}"


@dataclass(frozen=True)
class Backend:
    """A model backend: its config class and the builder that makes a `ChatModel` from one."""

    config: type[ChatModelConfig]
    build: Callable[[Any], ChatModel]


BACKENDS: Registry[Backend] = Registry("model backend")
"""Backend name -> `Backend`. The built-ins (openai, transformers, vllm, oracle) register in
`executor_sft.llm.backends`, as a user's own backend does."""


def build_chat_model(cfg: ChatModelConfig | dict[str, Any]) -> ChatModel:
    """The model a config describes, made by its backend's builder."""
    if not isinstance(cfg, ChatModelConfig):
        cfg = ChatModelConfig.model_validate(cfg)
    return BACKENDS.get(cfg.backend).build(cfg)


def api_keys(models: Iterable[ChatModelConfig]) -> dict[str, str]:
    """This process's values of every `api_key_env` the models name (what a Ray actor needs: a
    cluster started without them, `ray start` in another shell, does not have them)."""
    names = {getattr(model, "api_key_env", None) for model in models}
    return {name: os.environ[name] for name in sorted(n for n in names if n) if os.environ.get(name)}

"""`ModelPool`: the one way to turn `models: {role: ChatModelConfig}` into chat models.

Each distinct config is built once and shared by every role (and every sweep cell) that names
it, so in-process weights load once. Collection and evaluation build their models through it
(`Runtime.build`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from executor_sft.llm.base import ChatModel
from executor_sft.llm.config import ChatModelConfig, build_chat_model

logger = logging.getLogger(__name__)


class ModelPool:
    """Builds each distinct model config once and shares it across roles and sweep cells.

    `factory` replaces `build_chat_model` (tests map some configs to scripted doubles).
    """

    def __init__(self, factory: Callable[[ChatModelConfig], ChatModel] | None = None) -> None:
        self._models: dict[str, ChatModel] = {}
        self.factory = factory or build_chat_model

    def get(self, cfg: ChatModelConfig) -> ChatModel:
        key = cfg.model_dump_json()
        if key not in self._models:
            logger.info("loading model %s (%s)", cfg.label(), cfg.backend)
            self._models[key] = self.factory(cfg)
        return self._models[key]

    def build(self, models: Mapping[str, ChatModelConfig]) -> dict[str, ChatModel]:
        return {role: self.get(cfg) for role, cfg in models.items()}

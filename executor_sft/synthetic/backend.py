"""The scripted policies as a model backend, so evaluation and sweep configs can name them.

    models:
      backbone: {backend: "executor_sft.synthetic.backend:scripted", model: backbone, world: runs/wide/world}
      executor: {backend: "executor_sft.synthetic.backend:scripted", model: teacher, world: runs/wide/world}

`model` is the policy (backbone, answerer, judge, teacher, student); `world` a directory that
`write_world` wrote. The policies are data sources with known behaviour, not LLMs (package docstring).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import Field

from executor_sft.llm.base import ChatModel
from executor_sft.llm.config import Backend, ChatModelConfig
from executor_sft.synthetic.scripted_answerer import ScriptedAnswerer
from executor_sft.synthetic.scripted_backbone import ScriptedBackbone
from executor_sft.synthetic.scripted_executor import ScriptedTeacherExecutor, scripted_student_executor
from executor_sft.synthetic.scripted_judge import ScriptedJudge
from executor_sft.synthetic.world import World, load_world

BACKEND = "executor_sft.synthetic.backend:scripted"


class ScriptedConfig(ChatModelConfig):
    backend: str = BACKEND
    model: Literal["backbone", "answerer", "judge", "teacher", "student"]
    world: str
    """A world directory written by `write_world` (`python -m executor_sft.synthetic`)."""
    noise: float = Field(0.0, ge=0.0, le=1.0)
    """Executors: share of sub-queries answered wrongly, drawn from `seed` (`ScriptedTeacherExecutor`)."""


@functools.cache
def _world(path: str) -> World:
    return load_world(path)


def build(cfg: ScriptedConfig) -> ChatModel:
    world = _world(str(Path(cfg.world).resolve()))
    makers = {
        "backbone": lambda: ScriptedBackbone(world),
        "answerer": lambda: ScriptedAnswerer(world),
        "judge": ScriptedJudge,
        "teacher": lambda: ScriptedTeacherExecutor(world, noise=cfg.noise, seed=cfg.seed or 0),
        "student": lambda: scripted_student_executor(world, noise=cfg.noise, seed=cfg.seed or 0),
    }
    return makers[cfg.model]()


scripted = Backend(ScriptedConfig, build)

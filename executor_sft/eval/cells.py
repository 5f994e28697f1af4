"""What the runs built from a base eval config share (`eval.sweep` over model pairs,
`eval.budget_sweep` over budgets, `eval.eval_set`'s reference run): the base config they start
from, the driver-only pipeline, and one validated `EvalConfig` per cell.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from executor_sft.configfile import read_yaml, validation_message
from executor_sft.errors import ConfigError
from executor_sft.eval.config import EvalConfig


def read_base(base: str | dict[str, Any]) -> dict[str, Any]:
    """The base eval config (a YAML path or an inline mapping) as a new dict, for cells to replace fields of."""
    return read_yaml(base) if isinstance(base, str) else dict(base)


def driver_pipeline(base: dict[str, Any]) -> dict[str, Any]:
    """The base's pipeline with its driver as the only executor role: a cell evaluates one
    executor, so no shadow role runs beside it."""
    pipeline = dict(base.get("pipeline") or {})
    driver = pipeline.get("driver", "executor")
    pipeline.update(executor_roles=[driver], driver=driver)
    return pipeline


def cell_config(base: dict[str, Any], where: str, **fields: Any) -> EvalConfig:
    """`base` with `fields` replaced, as one cell's EvalConfig; an invalid one is a ConfigError
    that names the cell (`where`, e.g. "sweep s, cell a+b")."""
    try:
        return EvalConfig.model_validate({**base, **fields})
    except ValidationError as exc:
        raise ConfigError(validation_message(where, exc)) from None

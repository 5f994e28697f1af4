"""The multi-agent trainer's per-step record, kept beside the Trainer's own state so a resume continues it.

The Trainer's checkpoint restores the weights, optimizer, scheduler, RNG and `log_history`, but
not what `MultiAgentGRPOTrainer` adds: the per-step episode log (each rollout's reward, group,
status, tokens and cut replies) and the seconds spent training in earlier processes. Both go into
`EPISODE_LOG` in every checkpoint and, at the end, in `output_dir` beside `trainer_state.json`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from executor_sft.files import write_json

EPISODE_LOG = "marl_episode_log.json"

logger = logging.getLogger(__name__)


@dataclass
class SavedEpisodeLog:
    """What a save holds: the step it was made at, one entry per step trained so far, the
    seconds spent in `train` over every process, and the step each process started at."""

    step: int = 0
    episode_log: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0
    starts: list[int] = field(default_factory=list)

    def write(self, directory: str | Path) -> None:
        """Atomically: a kill while writing leaves the old file or none."""
        write_json(Path(directory) / EPISODE_LOG, asdict(self))

    @classmethod
    def read(cls, directory: str | Path) -> SavedEpisodeLog | None:
        """The log saved in `directory`; None, with a warning, when it has none readable."""
        path = Path(directory) / EPISODE_LOG
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            logger.warning(
                "%s: no readable episode log (%s): the steps before it are not in the log", path, exc
            )
            return None

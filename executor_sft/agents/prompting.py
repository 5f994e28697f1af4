"""Role prompts: packaged defaults that a config can replace with text or a file.

Every field is `None` (use the packaged prompt in `executor_sft/agents/prompts/`), literal
text, or `file:<path>` to read a prompt from disk (relative paths resolve against the
working directory). `directory` swaps in a whole set at once: each `<name>.md` found there
replaces the packaged prompt of that name. The packaged prompts are this project's own
wording, not the paper's (its App. C and Fig. 5 prompts are figures its text does not give). Prompts may use `{name}` placeholders; only the names a role passes
(e.g. `{max_searches}`, `{top_k}`) are replaced, so other braces in a prompt are left as is.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from executor_sft.agents.executor_text import CORRECTION, EXECUTOR_PROMPTS, SEARCH_BUDGET_SPENT
from executor_sft.metrics.judge import default_judge_prompt

PROMPT_NAMES = (
    "executor_native",
    "executor_tag",
    "backbone",
    "answerer",
    "answerer_table",
    "single_agent",
    "judge",
)
FILE_PREFIX = "file:"


@functools.cache
def packaged_prompt(name: str) -> str:
    """The default prompt shipped with the package."""
    if name not in PROMPT_NAMES:
        raise KeyError(f"unknown prompt {name!r}; expected one of {PROMPT_NAMES}")
    if name == "judge":  # the judge is a metric; its prompt ships with executor_sft.metrics
        return default_judge_prompt()
    return resources.files("executor_sft.agents").joinpath("prompts", f"{name}.md").read_text("utf-8").strip()


def fill(template: str, **values: object) -> str:
    """Replace `{key}` for the given keys only (no str.format, so stray braces are safe)."""
    for key, value in values.items():
        template = template.replace("{" + key + "}", str(value))
    return template


class Prompts(BaseModel):
    """Prompt overrides per role (None = packaged default)."""

    model_config = ConfigDict(extra="forbid")

    executor_native: str | None = None
    executor_tag: str | None = None
    backbone: str | None = None
    answerer: str | None = None
    answerer_table: str | None = Field(None, exclude_if=lambda value: value is None)
    """The answerer's prompt for a table question (`Question.unique_columns`): a Markdown table
    answer. Left out of dumps when unset, so episode records without tables stay as they were."""
    single_agent: str | None = None
    judge: str | None = None
    directory: str | None = Field(None, exclude_if=lambda value: value is None)
    """A directory of prompt files named `<name>.md` (`backbone.md`, `executor_native.md`,
    `judge.md`, ...): each one present replaces that packaged prompt; a field set above wins."""

    # Short runtime notices (the executor's defaults are in executor_text).
    search_budget_spent: str = SEARCH_BUDGET_SPENT
    correction: str = CORRECTION
    backbone_reports: str = (
        "Reports from round {round}:\n\n{reports}\n\n"
        "Dispatch the next sub-queries, or reply <stop/> if these findings are enough. "
        "Rounds of dispatch left: {rounds_left}."
    )

    @field_validator(*PROMPT_NAMES)
    @classmethod
    def _check_file(cls, value: str | None, info) -> str | None:
        if value is not None and value.startswith(FILE_PREFIX):
            path = Path(value[len(FILE_PREFIX) :]).expanduser()
            if not path.is_file():
                raise ValueError(f"prompt {info.field_name}: file not found: {path}")
        return value

    @field_validator("directory")
    @classmethod
    def _check_directory(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_dir():
            raise ValueError(f"prompts directory not found: {value}")
        return value

    def get(self, name: str) -> str:
        """The prompt text for `name`: override text, override file contents, or the default."""
        path = self.file(name)
        if path is not None:
            return path.read_text("utf-8").strip()
        value = getattr(self, name)
        return packaged_prompt(name) if value is None else value

    def file(self, name: str) -> Path | None:
        """The file the prompt `name` is read from (a `file:` field or the directory's), or None."""
        if name not in PROMPT_NAMES:
            raise KeyError(f"unknown prompt {name!r}; expected one of {PROMPT_NAMES}")
        value = getattr(self, name)
        if value is None and self.directory is not None:
            own = Path(self.directory).expanduser() / f"{name}.md"
            return own if own.is_file() else None
        if value is not None and value.startswith(FILE_PREFIX):
            return Path(value[len(FILE_PREFIX) :]).expanduser()
        return None

    def file_digests(self) -> dict[str, str]:
        """The sha256 of each prompt read from a file, by prompt name. A run's system record holds
        them, so a prompt file edited in place between a run and its resume is a changed system
        (the config, which names only the path, is the same)."""
        return {
            name: hashlib.sha256(path.read_bytes()).hexdigest()
            for name in PROMPT_NAMES
            if (path := self.file(name)) is not None
        }

    def render(self, name: str, **values: object) -> str:
        return fill(self.get(name), **values)

    def executor(self, protocol: str) -> str:
        """The executor's system prompt template for `protocol` ("native" or "tag")."""
        return self.get(EXECUTOR_PROMPTS.get(protocol, "executor_native"))

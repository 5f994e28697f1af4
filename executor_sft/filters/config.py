"""Filter settings: one dataclass so recipes parse it from the command line / YAML unchanged."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from executor_sft.errors import ConfigError
from executor_sft.filters.stratum import DEFAULT_STRATA, resolve_stratum


@dataclass
class FilterConfig:
    """Thresholds and role names of the trajectory filter (defaults: docs/filters.md, "Rules")."""

    require_judge: bool = field(
        default=True,
        metadata={"help": "Correct needs outcome.judge is True as well as EM (a null judge fails)."},
    )
    min_em: float = field(default=1.0, metadata={"help": "Correct needs outcome.em >= this (EM is 0/1)."})
    teacher_single: Literal["uncovered", "all"] = field(
        default="uncovered",
        metadata={
            "help": "Keep correct teacher single-search runs always ('all': the paper's Sec. 3.4 keeps "
            "correct single-search runs 'from either the teacher or the untuned student'; "
            "filter_paper.yaml) or only for sub-queries no correct student run covers ('uncovered', "
            "ours and the default: the student's own run already anchors that sub-query)."
        },
    )
    single_searches: int = field(
        default=1, metadata={"help": "n_searches a run must have for the single_search stratum."}
    )
    min_searches: int = field(
        default=2, metadata={"help": "Minimum n_searches for the info_gain_multi_search stratum."}
    )
    student_role: str = field(default="student", metadata={"help": "Role name of the student executor."})
    teacher_role: str = field(default="teacher", metadata={"help": "Role name of the teacher executor."})
    budget1_role: str = field(
        default="teacher_budget1",
        metadata={"help": "Role name of the counterfactual max_searches=1 re-runs."},
    )
    exclude_corrected: bool = field(
        default=True,
        metadata={
            "help": "Drop runs with a malformed turn that needed a corrective message (bad tool JSON, "
            "unknown tool, a turn that neither searches nor reports)."
        },
    )
    dedupe: bool = field(
        default=True, metadata={"help": "Keep identical message sequences once (first in file)."}
    )
    keep_reasoning: bool = field(
        default=True, metadata={"help": "Keep assistant reasoning_content in rows (and in the dedupe key)."}
    )
    tool_arguments: Literal["dict", "json"] = field(
        default="dict",
        metadata={
            "help": "Write tool-call arguments as objects ('dict', what HF chat templates expect) or JSON strings."
        },
    )
    strata: list[str] = field(
        default_factory=lambda: list(DEFAULT_STRATA),
        metadata={
            "help": "Strata to emit (default: both paper strata): registered names or import paths "
            "'package.module:attr' of a Stratum. 'all_correct' (alone) is an ablation baseline: every "
            "correct student or teacher run, any number of searches."
        },
    )
    max_records_per_question_stratum: int | None = field(
        default=None,
        metadata={
            "help": "Keep at most this many rows per (source question, stratum). Ours: App. D says a "
            "question gives more than one record when rows of different strata are kept for it, which 1 "
            "reproduces; the paper states no cap. Among a "
            "question's rows of one stratum the kept ones are: student before teacher, then fewest "
            "searches, then fewest generated characters, then first in file order. None: keep all."
        },
    )

    def __post_init__(self) -> None:
        if self.teacher_single not in ("uncovered", "all"):
            raise ValueError(f"teacher_single must be 'uncovered' or 'all', not {self.teacher_single!r}")
        if self.tool_arguments not in ("dict", "json"):
            raise ValueError(f"tool_arguments must be 'dict' or 'json', not {self.tool_arguments!r}")
        alone = [name for name in self.strata if resolve_stratum(name).alone]
        if alone and len(set(self.strata)) > 1:
            others = [name for name in self.strata if name != alone[0]]
            raise ConfigError(
                f"stratum {alone[0]!r} claims the runs of every other stratum; select it alone, not with {others}"
            )
        if self.single_searches < 1:
            raise ValueError("single_searches must be >= 1")
        if self.min_searches <= self.single_searches:
            raise ValueError("min_searches must be greater than single_searches")
        if self.max_records_per_question_stratum is not None and self.max_records_per_question_stratum < 1:
            raise ValueError("max_records_per_question_stratum must be >= 1 (or None: no limit)")
        roles = {self.student_role, self.teacher_role, self.budget1_role}
        if len(roles) != 3:
            raise ValueError("student_role, teacher_role and budget1_role must differ")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

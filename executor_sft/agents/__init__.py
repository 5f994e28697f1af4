"""Role-factorised agent runtime: executor loop, backbone, answerer, pipeline, single-agent baseline."""

from executor_sft.agents.answerer import run_answerer
from executor_sft.agents.config import OutcomeConfig, PipelineConfig, RoleConfig
from executor_sft.agents.executor import run_executor
from executor_sft.agents.pipeline import (
    answer_with_replay,
    answer_with_substitution,
    driver_findings,
    episode_config_record,
    label_outcome,
    make_run_id,
    pipeline_config_of,
    run_counterfactual,
    run_episode,
)
from executor_sft.agents.prompting import Prompts
from executor_sft.agents.single_agent import run_single_agent
from executor_sft.agents.tools import (
    SEARCH_TOOL,
    SEARCH_TOOL_NAME,
    TOOLS,
    Tool,
    ToolArgumentError,
    ToolContext,
)

__all__ = [
    "SEARCH_TOOL",
    "SEARCH_TOOL_NAME",
    "TOOLS",
    "OutcomeConfig",
    "PipelineConfig",
    "Prompts",
    "RoleConfig",
    "Tool",
    "ToolArgumentError",
    "ToolContext",
    "answer_with_replay",
    "answer_with_substitution",
    "driver_findings",
    "episode_config_record",
    "label_outcome",
    "make_run_id",
    "pipeline_config_of",
    "run_answerer",
    "run_counterfactual",
    "run_episode",
    "run_executor",
    "run_single_agent",
]

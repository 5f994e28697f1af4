"""A generated fictional world and scripted policies for the offline demo and the tests.

The world (`write_world`) gives a corpus, multi-hop questions with decompositions and gold
passages, and held-out splits. The scripted policies implement `ChatModel` and play the
backbone, executor, answerer and judge roles through the real runtime; they are data
sources with known behaviour, never a stand-in for the LLM path.
"""

from executor_sft.schema import Role
from executor_sft.synthetic.relations import RELATIONS, Relation, parse_subquery, render_subject
from executor_sft.synthetic.scripted_answerer import ScriptedAnswerer
from executor_sft.synthetic.scripted_backbone import ScriptedBackbone, find_question
from executor_sft.synthetic.scripted_executor import ScriptedTeacherExecutor, scripted_student_executor
from executor_sft.synthetic.scripted_judge import ScriptedJudge
from executor_sft.synthetic.world import (
    DECOUPLED_WORLD,
    Entity,
    Hop,
    World,
    WorldConfig,
    WorldQuestion,
    generate_world,
    load_world,
    world_stats,
    write_world,
)

TEACHER_EXTRA_SEARCH_RATE = 0.22
"""Over-search rate that makes the scripted teacher search twice in ~40% of its invocations on the
default worlds (23% of sub-queries need the second search; 0.23 + 0.77 * 0.22 ~ 0.40), the share
the paper's frontier teacher shows (Tab. 4). Used by the sample data and the demo."""


def scripted_models(
    world: World,
    noise: float = 0.0,
    seed: int = 0,
    teacher_extra_search_rate: float = 0.0,
    teacher_double_check: bool = False,
) -> dict:
    """Role -> scripted `ChatModel` for `run_episode`: backbone, answerer, judge, teacher, student
    (`teacher_double_check`: see `ScriptedTeacherExecutor.double_check`)."""
    return {
        Role.BACKBONE: ScriptedBackbone(world),
        Role.ANSWERER: ScriptedAnswerer(world),
        Role.JUDGE: ScriptedJudge(),
        Role.TEACHER: ScriptedTeacherExecutor(
            world,
            noise=noise,
            extra_search_rate=teacher_extra_search_rate,
            double_check=teacher_double_check,
            seed=seed,
        ),
        Role.STUDENT: scripted_student_executor(world, noise=noise, seed=seed + 1),
    }


__all__ = [
    "DECOUPLED_WORLD",
    "RELATIONS",
    "TEACHER_EXTRA_SEARCH_RATE",
    "Entity",
    "Hop",
    "Relation",
    "ScriptedAnswerer",
    "ScriptedBackbone",
    "ScriptedJudge",
    "ScriptedTeacherExecutor",
    "World",
    "WorldConfig",
    "WorldQuestion",
    "find_question",
    "generate_world",
    "load_world",
    "parse_subquery",
    "render_subject",
    "scripted_models",
    "scripted_student_executor",
    "world_stats",
    "write_world",
]

"""Multi-agent GRPO: a whole episode (lead turns, every sub-agent trajectory, the final answer) is one sample.

Built as a thin `GRPOTrainer` subclass (TRL 1.16) overriding `_generate_and_score_completions`:
TRL's `rollout_func` returns one completion per prompt with one reward per row, while a
multi-agent episode is several isolated contexts (the lead's, one per sub-agent), whose tokens get
per-token weights from one rollout-level advantage (`grpo.credit`). So each trained model call of
an episode becomes one row (its prompt; its sampled ids as the completion), and TRL's own loss
(`_compute_loss`, loss_type `dapo`) runs on those rows with (B, T) advantages, which it accepts.
Tool results never sit in a completion: a later turn's prompt holds them.

The episode runs on the project's pipeline (`agents.pipeline.run_episode`): the policy plays the
sub-agents (role `student`); with `train_lead` it also plays the lead, otherwise the lead is the
fixed backbone. The fixed answerer writes the final answer; its score on the gold answers (EM or
F1; item F1 for a table) is the rollout's reward. For `credit: substitution` a reference executor
(role `teacher`) runs the same sub-queries as a shadow, and each policy sub-agent is also scored
with its report in place of the reference's, every other finding the reference's.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from executor_sft.agents.answerer import run_answerer
from executor_sft.agents.config import PipelineConfig
from executor_sft.agents.pipeline import driver_findings, run_episode, substitute_report
from executor_sft.errors import ConfigError
from executor_sft.grpo.credit import CREDITS, AgentTokens, Rollout, token_weights
from executor_sft.grpo.episode_log import SavedEpisodeLog
from executor_sft.grpo.hybrid import HybridRepeatSampler
from executor_sft.grpo.rollout_failures import (
    AgentTrace,
    CallTrace,
    FailureRules,
    failure_counts,
)
from executor_sft.llm.base import SamplingParams
from executor_sft.metrics.scoring import score_answer
from executor_sft.safe_interrupt import run_async
from executor_sft.schema import Episode, Question, Role

POLICY = Role.STUDENT
"""The executor role the policy plays."""
REFERENCE = Role.TEACHER
"""The shadow executor whose reports the substitution credit substitutes into."""
LEAD = Role.BACKBONE


@dataclass
class MARLSettings:
    """What the multi-agent trainer needs beyond TRL's GRPOConfig."""

    pipeline: PipelineConfig
    credit: str = "shared"
    token_level: bool = True
    agent_level: bool = True
    train_lead: bool = False
    reward_metric: str = "f1"
    max_tokens_per_turn: int = 256
    enable_thinking: bool = False
    rules: FailureRules = field(default_factory=FailureRules)
    deep_share: float | None = None
    loss_rows: int | None = 4

    def __post_init__(self) -> None:
        CREDITS.check(self.credit)
        if self.reward_metric not in ("em", "f1"):
            raise ConfigError(f"reward_metric: em or f1, got {self.reward_metric!r}")


@dataclass
class TrainedCall:
    role: str
    agent: int
    prompt_ids: list[int]
    completion_ids: list[int]


@dataclass
class EpisodeSample:
    """One episode as a GRPO sample: its rollout (for credit), its rows, what was measured."""

    episode: Episode
    rollout: Rollout
    calls: list[TrainedCall]
    status: str
    score: float
    completion_tokens: int
    cut_calls: int = 0
    """Trained calls cut at their token cap, counted whatever the failure rules make of them."""


def _score(metrics: Any, metric: str) -> float:
    return float(metrics.em if metric == "em" else metrics.f1)


def _call_fields(call: Any) -> dict[str, Any] | None:
    call = call.model_dump(mode="json") if hasattr(call, "model_dump") else call
    return call if call and call.get("sampled_tokens") and not call.get("error") else None


class EpisodeTokenizer:
    """Model calls -> (prompt ids, sampled ids, stopped), with the chat template generation used."""

    def __init__(self, tokenizer: Any, stop_ids: set[int], enable_thinking: bool):
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        self.enable_thinking = enable_thinking

    def __call__(self, call: Mapping[str, Any]) -> tuple[list[int], list[int], bool]:
        from executor_sft.llm.transformers_backend import render_prompt

        text = render_prompt(self.tokenizer, call["messages"], call.get("tools"), self.enable_thinking)
        prompt = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = list(call["sampled_tokens"]["ids"])
        return prompt, ids, bool(ids) and ids[-1] in self.stop_ids


def _agents(episode: Episode, train_lead: bool) -> list[tuple[str, str, list[dict], list[str], Any]]:
    """(role, finish, trained calls, search queries, run) of each trained agent, the lead first."""
    out = []
    if train_lead:
        calls = [c for c in (_call_fields(r.backbone) for r in episode.rounds if r.backbone) if c]
        finish = {"round_budget": "turn_budget", "error": "invalid"}.get(episode.stop_reason, "report")
        if episode.stop_reason == "error" and not str(episode.error or "").startswith("backbone"):
            finish = "report"
        out.append((LEAD, finish, calls, [], None))
    for run in episode.runs:
        if run.role == POLICY:
            calls = [c for c in (_call_fields(c) for c in run.calls) if c]
            out.append((POLICY, run.finish, calls, [s.query for s in run.searches], run))
    return out


async def substitution_rewards(
    episode: Episode, answerer: Any, pipeline: PipelineConfig, metric: str
) -> dict[str, float]:
    """run_id -> the score of the answer with that policy run's report in place of the reference's."""
    findings = driver_findings(episode, REFERENCE)
    slots = [pos for pos, _, _ in findings]
    out = {}
    for run in episode.runs_for(POLICY):
        at = slots.index((run.round, run.sub_query_index))
        pairs = substitute_report([(q, r) for _, q, r in findings], at, run.report)
        result = await run_answerer(
            answerer,
            episode.question.question,
            pairs,
            prompts=pipeline.prompts,
            sampling=pipeline.sampling_for(Role.ANSWERER),
            answer_format=episode.question.answer_format,
        )
        metrics = await score_answer(episode.question, result.answer, None)
        out[run.run_id] = _score(metrics, metric) if result.error is None else 0.0
    return out


def episode_sample(
    episode: Episode,
    group: Any,
    settings: MARLSettings,
    encode: EpisodeTokenizer,
    substituted: Mapping[str, float] | None = None,
) -> EpisodeSample:
    """The episode's rollout (reward after the failure rules, agents with their token counts) and rows."""
    rules = settings.rules
    score = _score(episode.metrics, settings.reward_metric)
    agents, calls, traces = [], [], []
    positions = {pos: i for i, (pos, _, _) in enumerate(driver_findings(episode, POLICY))}
    for k, (role, finish, raw_calls, queries, run) in enumerate(_agents(episode, settings.train_lead)):
        encoded = [encode(c) for c in raw_calls]
        trace = AgentTrace(
            role, finish, [CallTrace(len(p), ids, stopped) for p, ids, stopped in encoded], queries
        )
        traces.append(trace)
        reward = position = None
        if run is not None and substituted is not None:
            reward = rules.reward(rules.classify([trace]), substituted[run.run_id])
            position = positions[(run.round, run.sub_query_index)]
        agents.append(AgentTokens(role, [len(ids) for _, ids, _ in encoded], reward, position))
        calls.extend(TrainedCall(role, k, p, ids) for p, ids, _ in encoded)
    status = rules.classify(traces)
    rollout = Rollout(group, rules.reward(status, score), agents, in_loss=rules.in_loss(status))
    cut = sum(not c.stopped for t in traces for c in t.calls)
    return EpisodeSample(
        episode, rollout, calls, status, score, sum(len(c.completion_ids) for c in calls), cut
    )


def batch_weights(samples: Sequence[EpisodeSample], settings: MARLSettings, scale: bool) -> list[list[float]]:
    """One weight per trained call row (all its tokens share it), in `samples`' call order."""
    rollouts = [s.rollout for s in samples]
    advantages = CREDITS.get(settings.credit)(rollouts, scale)
    weights = token_weights(
        rollouts, advantages, token_level=settings.token_level, agent_level=settings.agent_level
    )
    out = []
    for sample, per_agent in zip(samples, weights, strict=True):
        turn = [0] * len(sample.rollout.agents)
        for call in sample.calls:
            out.append(per_agent[call.agent][turn[call.agent]])
            turn[call.agent] += 1
    return out


def group_std(values: Sequence[float], groups: Sequence[Any]) -> float:
    """Mean over groups of the rewards' standard deviation within the group (population)."""
    by: dict[Any, list[float]] = {}
    for v, g in zip(values, groups, strict=True):
        by.setdefault(g, []).append(v)
    return statistics.fmean(statistics.pstdev(v) for v in by.values()) if by else 0.0


class EpisodeReward:
    """The rollout reward TRL's constructor asks for: the fixed answerer's score of the episode
    (`metric`), read from the episodes this trainer ran (`episodes=`)."""

    def __init__(self, metric: str = "f1"):
        self.metric = metric
        self.__name__ = f"episode_{metric}"

    def __call__(self, prompts=None, completions=None, episodes: Sequence[Episode] = (), **kwargs: Any):
        return [_score(e.metrics, self.metric) for e in episodes]


def make_trainer_class(base: type) -> type:
    """`MultiAgentGRPOTrainer` over `base` (TRL's GRPOTrainer or a subclass of it)."""

    class MultiAgentGRPOTrainer(base):
        """GRPO whose samples are multi-agent episodes; see the module docstring."""

        def __init__(self, *args: Any, marl: MARLSettings, models: dict[str, Any], retriever: Any, **kwargs):
            super().__init__(*args, **kwargs)
            a = self.args
            if a.steps_per_generation != 1 or self.num_iterations != 1 or a.loss_type != "dapo":
                raise ConfigError(
                    "multi-agent GRPO needs steps_per_generation: 1, num_iterations: 1 and loss_type: dapo "
                    "(a batch's rows vary in number; its loss divides by the rollouts in it)"
                )
            if marl.credit == "substitution" and REFERENCE not in models:
                raise ConfigError(
                    "credit: substitution needs `reference`: the executor whose reports are substituted"
                )
            if marl.loss_rows is not None and self.is_deepspeed_enabled:
                raise ConfigError(
                    "loss_rows: leave it unset (null) under DeepSpeed, whose engine steps once per backward"
                )
            self.marl = marl
            self.role_models = models
            self.retriever = retriever
            self._policy = None
            self.episode_log: list[dict[str, Any]] = []
            self.train_starts: list[int] = []  # the step each `train` call started at
            self._seconds_before, self._since = 0.0, None

        @property
        def train_seconds(self) -> float:
            """Seconds spent in `train`, over every process that trained this run."""
            running = time.perf_counter() - self._since if self._since is not None else 0.0
            return self._seconds_before + running

        def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
            """TRL's training; resuming a checkpoint also continues its episode log and seconds."""
            from transformers.trainer_utils import get_last_checkpoint

            from executor_sft.training.checkpoints import checkpoint_step

            checkpoint = resume_from_checkpoint
            if checkpoint is True:
                checkpoint = get_last_checkpoint(self.args.output_dir)
            saved = SavedEpisodeLog.read(checkpoint) if checkpoint else SavedEpisodeLog()
            if saved is None:  # a checkpoint saved without one: its steps are missing from the log
                saved = SavedEpisodeLog(step=checkpoint_step(checkpoint) or 0)
            self.episode_log, self.train_starts = list(saved.episode_log), [*saved.starts, saved.step]
            self._seconds_before, self._since = saved.train_seconds, time.perf_counter()
            try:
                return super().train(resume_from_checkpoint, *args, **kwargs)
            finally:
                self._seconds_before, self._since = self.train_seconds, None

        def saved_episode_log(self) -> SavedEpisodeLog:
            return SavedEpisodeLog(
                self.state.global_step, self.episode_log, self.train_seconds, self.train_starts
            )

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            """The Trainer's checkpoint, then the episode log into it: before the run record a
            stage writes on save, whose presence marks the checkpoint complete."""
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            super()._save_checkpoint(model, trial)
            if self.args.should_save:
                folder = Path(self.args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
                self.saved_episode_log().write(folder)

        def save_state(self) -> None:
            """`trainer_state.json` and, beside it, the episode log."""
            super().save_state()
            if self.args.should_save:
                self.saved_episode_log().write(self.args.output_dir)

        def _get_train_sampler(self, dataset: Any = None):
            if self.marl.deep_share is None:
                return super()._get_train_sampler(dataset)
            data = dataset if dataset is not None else self.train_dataset
            return HybridRepeatSampler(
                [bool(w) for w in data["is_wide"]],
                self.args.generation_batch_size // self.num_generations,
                self.num_generations,
                self.marl.deep_share,
                seed=self.args.seed,
            )

        def policy_chat(self) -> Any:
            from executor_sft.llm.transformers_backend import TransformersChatModel

            if self._policy is None:
                model = self.accelerator.unwrap_model(self.model)
                self._policy = TransformersChatModel(
                    model,
                    self.processing_class,
                    name="policy",
                    sampling=SamplingParams(
                        temperature=self.temperature,
                        max_tokens=self.marl.max_tokens_per_turn,
                        enable_thinking=self.marl.enable_thinking,
                    ),
                    prefix_cache_tokens=0,  # the weights change every step
                    max_batch_size=16,
                )
            return self._policy

        def run_episodes(self, questions: Sequence[Question], sample_indices: Sequence[int]) -> list[Episode]:
            policy = self.policy_chat()
            models = dict(self.role_models)
            models[POLICY] = policy
            if self.marl.train_lead:
                models[LEAD] = policy
            roles = [POLICY, REFERENCE] if self.marl.credit == "substitution" else [POLICY]
            config = self.marl.pipeline.model_copy(
                update={"executor_roles": roles, "driver": POLICY, "label_outcomes": False}
            )
            model = policy.model
            was_training = model.training
            model.eval()
            try:
                return _gather(
                    (
                        run_episode(q, models, self.retriever, config, i)
                        for q, i in zip(questions, sample_indices, strict=True)
                    ),
                    desc="rollouts" if self.accelerator.is_main_process else None,
                )
            finally:
                model.train(was_training)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            """TRL's loss over the batch's rows in chunks of `loss_rows`, each chunk's backward run at
            once: a step's rows (every trained call of every episode) would hold all their activations
            otherwise. The loss is a sum over rows divided by the rollouts in the batch, so the chunks'
            gradients add up to the whole batch's; the last chunk's loss goes back to the Trainer for
            its backward, carrying the others' values (detached) for the log."""
            import torch

            rows = inputs["prompt_ids"].size(0)
            size = self.marl.loss_rows
            if size is None or rows <= size or not torch.is_grad_enabled():  # evaluation: no backward
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            # rows of like length share a chunk, which drops the columns all of them pad
            length = inputs["prompt_mask"].sum(1) + inputs["completion_mask"].sum(1)
            chunks = length.argsort().split(size)
            done = 0.0
            for chunk in tqdm(
                chunks[:-1], desc="loss chunks", leave=False, disable=not self.accelerator.is_main_process
            ):
                loss = super().compute_loss(model, _rows(inputs, chunk))
                self.accelerator.backward(loss)
                done = done + loss.detach()
            return super().compute_loss(model, _rows(inputs, chunks[-1])) + done

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            import torch

            device = self.accelerator.device
            mode = "train" if self.model.training else "eval"
            start = time.perf_counter()
            questions = [Question.model_validate_json(row["question_json"]) for row in inputs]
            groups = [(self.state.global_step, i // self.num_generations) for i in range(len(inputs))]
            episodes = self.run_episodes(questions, [i % self.num_generations for i in range(len(inputs))])
            substituted: list[dict[str, float] | None] = [None] * len(episodes)
            if self.marl.credit == "substitution":
                answerer = self.role_models[Role.ANSWERER]
                substituted = _gather(
                    substitution_rewards(e, answerer, self.marl.pipeline, self.marl.reward_metric)
                    for e in episodes
                )
            policy = self.policy_chat()
            encode = EpisodeTokenizer(self.processing_class, policy.stop_ids, self.marl.enable_thinking)
            samples = [
                episode_sample(e, g, self.marl, encode, s)
                for e, g, s in zip(episodes, groups, substituted, strict=True)
            ]
            scale = str(self.args.scale_rewards) not in ("none", "False")
            weights = batch_weights(samples, self.marl, scale)
            rows = [c for s in samples for c in s.calls]
            kept = [s.rollout.in_loss for s in samples for _ in s.calls]
            if self.beta == 0.0:
                # Without a KL term a row whose tokens all weigh 0 (its group scored alike, its rollout
                # left the loss) adds nothing to the gradient: it is not run through the model.
                live = [i for i, (w, k) in enumerate(zip(weights, kept, strict=True)) if k and w != 0.0]
                rows, weights, kept = [rows[i] for i in live], [weights[i] for i in live], [True] * len(live)
            if not rows:  # nothing to train this step: a zero row
                pad = self.processing_class.pad_token_id or 0
                rows, weights, kept = [TrainedCall(POLICY, 0, [pad], [pad])], [0.0], [False]
            out = self._rows_to_inputs(rows, weights, kept, device)
            in_loss = sum(s.rollout.in_loss for s in samples)
            out["num_items_in_batch"] = torch.tensor(float(max(in_loss, 1)), device=device)
            if self.beta != 0.0:
                with torch.no_grad():
                    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
                    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
                    ref = self.ref_model if self.ref_model is not None else self.model
                    out["ref_per_token_logps"] = self._get_per_token_logps_and_entropies(
                        ref, ids, mask, out["completion_ids"].size(1)
                    )[0]
            self._log_samples(mode, samples, groups, time.perf_counter() - start)
            return out

        def _rows_to_inputs(
            self, rows: list[TrainedCall], weights: list[float], kept: list[bool], device: Any
        ) -> dict[str, Any]:
            """Left-padded prompts, right-padded completions; a row of a rollout out of the loss is masked."""
            import torch

            pad = self.processing_class.pad_token_id or 0
            p_len = max(len(r.prompt_ids) for r in rows)
            c_len = max(len(r.completion_ids) for r in rows)
            prompt_ids = torch.full((len(rows), p_len), pad, dtype=torch.long)
            prompt_mask = torch.zeros((len(rows), p_len), dtype=torch.long)
            completion_ids = torch.full((len(rows), c_len), pad, dtype=torch.long)
            completion_mask = torch.zeros((len(rows), c_len), dtype=torch.long)
            advantages = torch.zeros((len(rows), c_len), dtype=torch.float32)
            for i, (row, w, keep) in enumerate(zip(rows, weights, kept, strict=True)):
                p, c = row.prompt_ids, row.completion_ids
                prompt_ids[i, p_len - len(p) :] = torch.tensor(p)
                prompt_mask[i, p_len - len(p) :] = 1
                completion_ids[i, : len(c)] = torch.tensor(c)
                completion_mask[i, : len(c)] = int(keep)
                advantages[i, : len(c)] = w
            return {
                # which agent each row is (1: the lead) and its sampled length: TRL shuffles rows with these
                "marl_lead": torch.tensor([r.role == LEAD for r in rows], dtype=torch.long, device=device),
                "marl_tokens": torch.tensor(
                    [len(r.completion_ids) for r in rows], dtype=torch.long, device=device
                ),
                "prompt_ids": prompt_ids.to(device),
                "prompt_mask": prompt_mask.to(device),
                "completion_ids": completion_ids.to(device),
                "completion_mask": completion_mask.to(device),
                "advantages": advantages.to(device),
            }

        def _log_samples(self, mode: str, samples: list[EpisodeSample], groups: list, seconds: float) -> None:
            rewards = [s.rollout.reward for s in samples]
            m = self._metrics[mode]
            m["reward"].append(statistics.fmean(rewards))
            m["reward_std"].append(group_std(rewards, groups))
            m["marl/score"].append(statistics.fmean(s.score for s in samples))
            m["marl/em"].append(statistics.fmean(s.episode.metrics.em for s in samples))
            m["marl/f1"].append(statistics.fmean(s.episode.metrics.f1 for s in samples))
            m["marl/zero_std_groups"].append(
                statistics.fmean(
                    float(len({r for r, g2 in zip(rewards, groups, strict=True) if g2 == g}) == 1)
                    for g in set(groups)
                )
            )
            m["marl/trained_tokens_per_question"].append(
                statistics.fmean(s.completion_tokens for s in samples)
            )
            m["marl/sub_agents_per_question"].append(
                statistics.fmean(len(s.episode.runs_for(POLICY)) for s in samples)
            )
            m["marl/rollout_s"].append(seconds)
            for name, n in failure_counts([s.status for s in samples]).items():
                m[f"marl/failures/{name}"].append(float(n))
            m["marl/cut_rollouts"].append(float(sum(s.cut_calls > 0 for s in samples)))
            subs = [a.reward for s in samples for a in s.rollout.agents if a.reward is not None]
            if subs:
                m["marl/substitution_reward"].append(statistics.fmean(subs))
            self.episode_log.append(
                {
                    "step": self.state.global_step,
                    "rewards": rewards,
                    "groups": [list(g) for g in groups],
                    "statuses": [s.status for s in samples],
                    "tokens": [s.completion_tokens for s in samples],
                    "cut": [s.cut_calls for s in samples],
                }
            )

    return MultiAgentGRPOTrainer


def _gather(coroutines: Iterable[Any], desc: str | None = None) -> list[Any]:
    """Run coroutines concurrently, in order, from the Trainer's synchronous hooks; with `desc`, a
    progress bar (cleared when done) counts the finished ones: a CPU step's rollouts take minutes."""
    from tqdm.asyncio import tqdm_asyncio

    async def all_of() -> list[Any]:
        if desc is None:
            return list(await asyncio.gather(*coroutines))
        return list(await tqdm_asyncio.gather(*coroutines, desc=desc, leave=False))

    return run_async(all_of())


def _rows(inputs: dict[str, Any], index: Any) -> dict[str, Any]:
    """The rows `index` of every per-row tensor, less the columns every one of them pads (the
    prompts' left, the completions' right: no loss token sees them); scalars as they are."""
    import torch

    out = {k: v[index] if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in inputs.items()}
    prompt, completion = out["prompt_mask"], out["completion_mask"]
    first = int(prompt.any(0).nonzero()[0]) if prompt.any() else 0
    used = completion.any(0).nonzero()
    last = int(used[-1]) + 1 if len(used) else 1
    for k, v in out.items():  # every two-dimensional tensor but the prompt's runs along the completion
        if k in ("prompt_ids", "prompt_mask"):
            out[k] = v[:, first:]
        elif isinstance(v, torch.Tensor) and v.dim() == 2:
            out[k] = v[:, :last]
    return out


def question_dataset(questions: Sequence[Question]) -> Any:
    """TRL's train dataset: the question as a one-message `prompt` (what the stage card shows), the
    whole row as JSON (what the episode runs on), its kind (what the hybrid sampler reads)."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": q.question}],
                "question_json": q.model_dump_json(),
                "is_wide": q.answer_format == "table",
            }
            for q in questions
        ]
    )


async def evaluate_episodes(
    questions: Sequence[Question],
    models: Mapping[str, Any],
    retriever: Any,
    pipeline: PipelineConfig,
    desc: str = "episodes",
) -> list[Episode]:
    """Held-out episodes with the policy as the sub-agents (`models[POLICY]`), the lead as given; a
    progress bar counts finished episodes (CPU runs of a few dozen take many minutes)."""
    from tqdm.asyncio import tqdm_asyncio

    config = pipeline.model_copy(
        update={"executor_roles": [POLICY], "driver": POLICY, "label_outcomes": False}
    )
    runs = (run_episode(q, models, retriever, config, 0) for q in questions)
    return list(await tqdm_asyncio.gather(*runs, desc=desc, total=len(questions)))

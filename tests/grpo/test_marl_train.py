"""Multi-agent GRPO, really run: 2 steps on CPU over a synthetic world with wide tasks.

A tiny random Qwen3 plays the sub-agents (and, with `train_lead`, the lead) through the real
pipeline, BM25 retrieval over the world's corpus and the world's scripted lead, answerer and
reference executor. The batch TRL computes the loss on is captured in `compute_loss`.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow


def _scripted(world_dir, model: str) -> dict:
    return {"backend": "executor_sft.synthetic.backend:scripted", "model": model, "world": str(world_dir)}


def _train(tiny_checkpoint, wide_world, tmp_path, **options):
    from trl import GRPOConfig, GRPOTrainer, ModelConfig

    from executor_sft.grpo.marl_train import MARLScriptArguments, build_marl_trainer, load_questions

    world_dir, _, retriever = wide_world
    captured: list[dict] = []

    class Capturing(GRPOTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            captured.append({k: v.detach().clone() for k, v in inputs.items()})
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    beta = options.pop("beta", 0.0)
    questions = load_questions(str(world_dir / "questions_train.jsonl"))
    deep = [q for q in questions if q.answer_format == "text"][:2]
    wide = [q for q in questions if q.answer_format == "table"][:2]
    script_args = MARLScriptArguments(
        backbone=_scripted(world_dir, "backbone"),
        answerer=_scripted(world_dir, "answerer"),
        reference=_scripted(world_dir, "teacher"),
        max_rounds=2,
        max_parallel=2,
        max_turns=2,
        max_tokens_per_turn=24,
        cut_is_context_limit=False,  # a random model rarely ends a turn: keep its cut replies in the loss
        deep_share=0.5,
        **{"loss_rows": None, **options},  # one compute_loss a step: the capture below counts them
    )
    training_args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        learning_rate=1e-3,
        beta=beta,
        loss_type="dapo",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        chat_template_kwargs={"enable_thinking": False},
        dataloader_num_workers=0,
    )
    trainer = build_marl_trainer(
        script_args,
        training_args,
        ModelConfig(model_name_or_path=str(tiny_checkpoint)),
        questions=deep + wide,
        retriever=retriever,
        trainer_cls=Capturing,
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2 and len(captured) == 2
    moved = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    return trainer, captured, moved


@pytest.mark.parametrize("credit", ["shared", "substitution"])
def test_lead_tokens_carry_loss_only_with_train_lead(tiny_checkpoint, wide_world, tmp_path, credit):
    for train_lead in (True, False):
        # beta > 0: every row of a rollout in the loss is trained (its KL term), whatever its advantage
        trainer, captured, moved = _train(
            tiny_checkpoint, wide_world, tmp_path / str(train_lead), train_lead=train_lead, credit=credit,
            beta=0.04,
        )  # fmt: skip
        lead_rows = 0
        for batch in captured:
            mask, adv = batch["completion_mask"], batch["advantages"]
            for i in range(mask.shape[0]):
                n = int(batch["marl_tokens"][i])
                kept = int(mask[i].sum())
                assert (
                    kept in (0, n) and int(mask[i, n:].sum()) == 0
                )  # all of a row's sampled tokens, or none
                assert torch.all(adv[i, :n] == adv[i, 0]) and torch.all(adv[i, n:] == 0)  # one weight a row
                lead_rows += bool(batch["marl_lead"][i]) and kept > 0
        logs = [h for h in trainer.state.log_history if "reward" in h]
        assert len(logs) == 2
        for h in logs:
            assert "reward_std" in h and "marl/failures/turn_limit" in h
            # a random model's replies run to their cap: counted, though the rules keep them in the loss
            assert h["marl/cut_rollouts"] > 0 and h["marl/failures/context_limit"] == 0
        if train_lead:
            assert lead_rows > 0  # the lead's own sampled tokens are in the loss
        else:
            assert lead_rows == 0  # the fixed lead is never trained
            assert all(int(b["marl_lead"].sum()) == 0 for b in captured)


def _one_batch(tiny_checkpoint, wide_world, tmp_path, max_rounds: int):
    """A trainer in training mode and the batch `_generate_and_score_completions` built for its first
    step. beta > 0 keeps every row (beta 0 drops the weightless) and its gradient is 0 at the first
    step; fp32 matmuls, since bf16 autocast rounds summation orders apart by ~1e-3."""
    from trl import GRPOConfig, ModelConfig

    from executor_sft.grpo.marl_train import MARLScriptArguments, build_marl_trainer, load_questions

    world_dir, _, retriever = wide_world
    questions = [
        q for q in load_questions(str(world_dir / "questions_train.jsonl")) if q.answer_format == "text"
    ]
    trainer = build_marl_trainer(
        MARLScriptArguments(
            backbone=_scripted(world_dir, "backbone"), answerer=_scripted(world_dir, "answerer"),
            max_rounds=max_rounds, max_parallel=2, max_turns=2, max_tokens_per_turn=16,
            cut_is_context_limit=False,
        ),
        GRPOConfig(
            output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
            beta=0.04, loss_type="dapo", report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0,
            bf16=False, chat_template_kwargs={"enable_thinking": False},
        ),
        ModelConfig(model_name_or_path=str(tiny_checkpoint)),
        questions=questions[:2],
        retriever=retriever,
    )  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what `train()` sets before its first step
    return trainer, trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))


def test_the_loss_in_row_chunks_gives_the_whole_batch_gradient(tiny_checkpoint, wide_world, tmp_path):
    """`loss_rows` runs TRL's loss a few rows at a time with a backward each: the same loss and the same
    gradient as all rows at once (advantages drawn at random, so the gradient is not zero; beta > 0
    keeps every row in the batch)."""
    trainer, inputs = _one_batch(tiny_checkpoint, wide_world, tmp_path, max_rounds=2)
    rows = inputs["prompt_ids"].size(0)
    assert rows > 3, rows
    torch.manual_seed(0)
    inputs["advantages"] = torch.randn_like(inputs["advantages"]) * inputs["completion_mask"]
    inputs["completion_mask"] = torch.ones_like(inputs["completion_mask"]) * (inputs["advantages"] != 0)
    results = {}
    for size in (None, 3):
        trainer.model.zero_grad()
        trainer.marl.loss_rows = size
        loss = trainer.compute_loss(trainer.model, inputs)
        trainer.accelerator.backward(loss)
        grads = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
        results[size] = (float(loss), grads)
    (whole_loss, whole), (chunked_loss, chunked) = results[None], results[3]
    assert any(float(g.abs().sum()) > 0 for g in whole)
    assert chunked_loss == pytest.approx(whole_loss, rel=1e-5, abs=1e-7)
    assert len(whole) == len(chunked)
    for a, b in zip(whole, chunked, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # fp32 rounding: chunks drop pad columns


def test_without_kl_rows_that_weigh_nothing_are_not_run(tiny_checkpoint, wide_world, tmp_path):
    """beta 0: a row whose advantage is 0 (its group scored alike) or whose rollout left the loss adds
    nothing to the gradient, so the batch holds only rows with a weight."""
    trainer, captured, _ = _train(tiny_checkpoint, wide_world, tmp_path, credit="shared")
    logged = sum(len(e["rewards"]) for e in trainer.episode_log)
    assert logged == 8  # 2 steps x 4 rollouts, all scored and logged
    for batch in captured:
        adv, mask = batch["advantages"], batch["completion_mask"]
        zero_pad = mask.shape[0] == 1 and int(mask.sum()) == 0  # a step with nothing to train
        assert zero_pad or all(float(adv[i].abs().sum()) > 0 for i in range(adv.shape[0]))


def test_held_out_episodes_come_back_in_question_order_with_the_policy_as_sub_agents(
    tiny_checkpoint, wide_world
):
    """What `bench/marl_credit.py` scores: one episode per question, in order (the bar's gather keeps it),
    the policy's runs recorded and the answer scored; a repeated question is sampled independently."""
    import asyncio

    from transformers import AutoModelForCausalLM

    from executor_sft.grpo.marl import LEAD, POLICY, evaluate_episodes
    from executor_sft.grpo.marl_train import MARLScriptArguments, build_role_model, load_questions
    from executor_sft.grpo.policy import load_tokenizer
    from executor_sft.llm.base import SamplingParams
    from executor_sft.llm.transformers_backend import TransformersChatModel
    from executor_sft.schema import Role

    world_dir, _, retriever = wide_world
    questions = load_questions(str(world_dir / "questions_train.jsonl"))
    picked = [q for q in questions if q.answer_format == "text"][:2] + [
        q for q in questions if q.answer_format == "table"
    ][:1]
    args = MARLScriptArguments(
        backbone=_scripted(world_dir, "backbone"), answerer=_scripted(world_dir, "answerer"),
        max_rounds=1, max_parallel=2, max_turns=1, max_tokens_per_turn=8,
    )  # fmt: skip
    policy = TransformersChatModel(
        AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint)), load_tokenizer(str(tiny_checkpoint)),
        name="policy", sampling=SamplingParams(temperature=1.0, max_tokens=8), prefix_cache_tokens=0,
    )  # fmt: skip
    models = {
        POLICY: policy,
        LEAD: build_role_model(args.backbone, "backbone"),
        Role.ANSWERER: build_role_model(args.answerer, "answerer"),
    }
    asked = [*picked, picked[0]]
    episodes = asyncio.run(evaluate_episodes(asked, models, retriever, args.settings(None).pipeline))
    assert [e.question.id for e in episodes] == [q.id for q in asked]
    assert all(e.runs_for(POLICY) and e.metrics is not None for e in episodes)
    first, again = episodes[0].runs_for(POLICY)[0], episodes[-1].runs_for(POLICY)[0]
    assert first.calls != again.calls  # the same question sampled twice: two draws


def test_one_update_raises_the_rows_with_positive_advantage_and_lowers_the_others(
    tiny_checkpoint, wide_world, tmp_path
):
    """The sign check a policy-gradient stage must pass before any learning curve means anything: on
    the batch `_generate_and_score_completions` built (sampled ids, re-rendered prompts), rows given
    advantage +1 gain log-probability after one SGD step on the loss and rows given -1 lose it."""
    trainer, inputs = _one_batch(tiny_checkpoint, wide_world, tmp_path, max_rounds=1)
    model = trainer.model
    rows = inputs["prompt_ids"].size(0)
    assert rows >= 2, rows
    sign = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(rows)])
    lengths = torch.tensor([int(n) for n in inputs["marl_tokens"]])  # every sampled position trains
    positions = torch.arange(inputs["completion_ids"].size(1))
    inputs["completion_mask"] = (positions[None, :] < lengths[:, None]).long()
    inputs["advantages"] = sign[:, None] * inputs["completion_mask"]

    def row_logps() -> torch.Tensor:
        with torch.no_grad():
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
            logits = model(input_ids=ids, attention_mask=mask).logits[
                :, -inputs["completion_ids"].size(1) - 1 : -1
            ]
            logp = logits.float().log_softmax(-1).gather(-1, inputs["completion_ids"][..., None])[..., 0]
            return (logp * inputs["completion_mask"]).sum(1) / inputs["completion_mask"].sum(1)

    before = row_logps()
    trainer.marl.loss_rows = None
    model.zero_grad()
    trainer.accelerator.backward(trainer.compute_loss(model, inputs))
    grads = [p for p in model.parameters() if p.grad is not None]
    step = 0.05 / float(
        torch.sqrt(sum((p.grad.float() ** 2).sum() for p in grads))
    )  # a small move: first order
    with torch.no_grad():
        for p in grads:
            p -= step * p.grad
    moved = row_logps() - before
    assert float(moved[sign > 0].mean()) > 0 > float(moved[sign < 0].mean()), moved

"""bench/marl_gradient_noise.py: its estimator on gradients of known signal and noise, and one real batch
gradient from the multi-agent trainer."""

from __future__ import annotations

import math

import pytest
import torch

from bench.marl_gradient_noise import batch_gradient, gram, jackknife, noise_scale


@pytest.mark.parametrize("noise_sd", [0.1, 1.0])
def test_the_estimator_recovers_the_signal_and_the_noise_it_was_given(noise_sd):
    """g_i = G + e_i with |G|^2 = 4 and E|e_i|^2 = d * sd^2: the estimates land near both (k = 400 gives
    a few percent of spread) and the ratio is the noise over the signal."""
    gen = torch.Generator().manual_seed(0)
    d, k = 1000, 400
    true = torch.zeros(d)
    true[:4] = 1.0
    grads = [true + noise_sd * torch.randn(d, generator=gen) for _ in range(k)]
    est = noise_scale(gram(grads, chunk=333))  # slices that do not divide the length
    noise = d * noise_sd**2
    assert est["signal"] == pytest.approx(4.0, rel=0.15, abs=0.15 * noise / math.sqrt(k))
    assert est["noise_per_batch"] == pytest.approx(noise, rel=0.05)
    assert est["noise_over_signal"] == pytest.approx(noise / 4.0, rel=0.25)
    assert est["mean_cosine"] == pytest.approx(4.0 / (4.0 + noise), rel=0.25)


def test_pure_noise_has_no_measurable_signal_and_zero_gradients_are_counted():
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(500, generator=gen) for _ in range(3)] + [torch.zeros(500)]
    dots = gram(grads)
    est = noise_scale(dots)
    assert est["zero_gradients"] == 1
    assert est["signal"] < 0.1 * est["noise_per_batch"]
    assert set(jackknife(dots)) == {"min", "max"}


def test_the_gram_matrix_is_every_pair_s_dot_product():
    gen = torch.Generator().manual_seed(2)
    grads = [torch.randn(1001, generator=gen) for _ in range(3)]
    expected = torch.tensor(
        [[float(a.double() @ b.double()) for b in grads] for a in grads], dtype=torch.float64
    )
    torch.testing.assert_close(gram(grads, chunk=100), expected)


def _trainer(tiny_checkpoint, wide_world, tmp_path, loss_rows, beta=0.0):
    from trl import GRPOConfig, ModelConfig

    from executor_sft.grpo.marl_train import MARLScriptArguments, build_marl_trainer, load_questions

    world_dir, _, retriever = wide_world
    scripted = {"backend": "executor_sft.synthetic.backend:scripted", "world": str(world_dir)}
    trainer = build_marl_trainer(
        MARLScriptArguments(
            backbone=scripted | {"model": "backbone"}, answerer=scripted | {"model": "answerer"},
            max_rounds=1, max_parallel=2, max_turns=1, max_tokens_per_turn=8, loss_rows=loss_rows,
            cut_is_context_limit=False,
        ),
        GRPOConfig(
            output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
            beta=beta, loss_type="dapo", report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0,
            bf16=False, chat_template_kwargs={"enable_thinking": False},
        ),
        ModelConfig(model_name_or_path=str(tiny_checkpoint)),
        questions=load_questions(str(world_dir / "questions_train.jsonl"))[:4],
        retriever=retriever,
    )  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what `train()` sets before its first step
    return trainer


def test_a_batch_whose_groups_scored_alike_has_a_zero_gradient(tiny_checkpoint, wide_world, tmp_path):
    """A tiny random policy scores 0 on every rollout: no group has an advantage, so beta 0 trains
    nothing and the bench counts a zero gradient, of the model's size."""
    trainer = _trainer(tiny_checkpoint, wide_world, tmp_path, loss_rows=2)
    grad, record = batch_gradient(trainer, next(iter(trainer.get_train_dataloader())))
    size = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    assert grad.shape == (size,)
    assert set(record["rewards"]) == {0.0}, record
    assert record["grad_norm"] == 0.0
    assert all(p.grad is None for p in trainer.model.parameters())


def test_the_batch_gradient_is_the_whole_loss_gradient_across_loss_chunks(
    tiny_checkpoint, wide_world, tmp_path
):
    """With advantages given (+1, -1 by row: the policy above earns none), the flattened gradient the
    bench takes through the trainer's chunked loss (loss_rows 1) equals one backward of the whole
    batch's loss, and it is not zero. beta > 0 keeps every row; its KL gradient is 0 before a step."""
    trainer = _trainer(tiny_checkpoint, wide_world, tmp_path, loss_rows=1, beta=0.04)
    sample = trainer._generate_and_score_completions
    seen = []

    def with_advantages(batch):
        inputs = sample(batch)
        lengths = inputs["marl_tokens"]
        positions = torch.arange(inputs["completion_ids"].size(1))
        inputs["completion_mask"] = (positions[None, :] < lengths[:, None]).long()
        sign = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(lengths.numel())])
        inputs["advantages"] = sign[:, None] * inputs["completion_mask"]
        seen.append(inputs)
        return inputs

    trainer._generate_and_score_completions = with_advantages
    grad, record = batch_gradient(trainer, next(iter(trainer.get_train_dataloader())))
    assert seen[0]["prompt_ids"].size(0) >= 2
    trainer.marl.loss_rows = None  # the whole batch in one forward and backward
    trainer.accelerator.backward(trainer.compute_loss(trainer.model, seen[0]))
    whole = torch.cat([p.grad.float().flatten() for p in trainer.model.parameters() if p.requires_grad])
    assert record["grad_norm"] > 0
    # chunks pad differently, which moves fp32 sums by rounding only
    assert float((grad - whole).norm() / whole.norm()) < 1e-4, float((grad - whole).norm() / whole.norm())

"""The CPU fast path's SFT options on a real batch: SmolLM2's tokenizer and weights, rows of the
project's sample data with their passages masked.

- `gathered_loss` gives TRL's loss and per-token log-probabilities (TRL scores every position
  on a CPU; the gathered head only the trained ones);
- `trainable_layers` leaves every frozen weight byte-identical after an optimizer step, and
  the layers it trains move;
- a model whose config soft-caps or scales logits is refused by the gathered head.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from forkserver import run_script
from trl.trainer.utils import add_fused_lm_head

from executor_sft.errors import ConfigError
from executor_sft.sft.gathered_loss import add_gathered_lm_head
from executor_sft.sft.models import cpu_has_native_bf16
from executor_sft.sft.partial import freeze_below_top_layers, layer_limited_peft_config
from executor_sft.sft.tokenize import IGNORE_INDEX, tokenize_example

REPO = Path(__file__).resolve().parents[2]
METRIC_OUTPUTS = ("log_probs", "entropy", "is_top1")  # what SFTTrainer asks TRL's head for


@pytest.fixture(scope="module")
def real_batch(smollm2):
    _, tokenizer = smollm2
    lines = (REPO / "data" / "sft.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    examples = [tokenize_example(json.loads(line), tokenizer, 1024) for line in lines]
    width = max(len(e["input_ids"]) for e in examples)
    batch = {
        "input_ids": torch.full((2, width), tokenizer.pad_token_id),
        "labels": torch.full((2, width), IGNORE_INDEX),
        "attention_mask": torch.zeros((2, width), dtype=torch.long),
    }
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        batch["input_ids"][i, :n] = torch.tensor(e["input_ids"])
        batch["labels"][i, :n] = torch.tensor(e["labels"])
        batch["attention_mask"][i, :n] = 1
    return batch


def _trl_model(smollm2):
    model = copy.deepcopy(smollm2[0])
    add_fused_lm_head(model, outputs=METRIC_OUTPUTS)
    return model


def test_real_batch_masks_most_tokens(real_batch):
    trained = (real_batch["labels"] != IGNORE_INDEX).sum() / real_batch["attention_mask"].sum()
    assert 0 < trained < 0.3  # the passages and prompts carry no loss: the waste the gathered head skips


@pytest.mark.slow
def test_gathered_loss_gives_trls_loss_log_probs_and_gradient_on_a_real_batch(smollm2, real_batch):
    outs, grads = [], []
    for gathered in (False, True):
        model = _trl_model(smollm2)
        if gathered:
            add_gathered_lm_head(model)
        # Only the last layer asks for gradients: backward stops there (both heads are above it).
        model.requires_grad_(False)
        model.model.layers[-1].requires_grad_(True)
        out = model(**real_batch, fused_lm_head=True)
        out.loss.backward()
        outs.append(out)
        grads.append(model.model.layers[-1].mlp.down_proj.weight.grad.clone())
    trl_out, ours = outs
    assert abs(ours.loss.item() - trl_out.loss.item()) <= 1e-5
    assert torch.allclose(ours.log_probs, trl_out.log_probs, atol=1e-5)
    assert torch.equal(ours.label_mask, trl_out.label_mask)
    assert torch.allclose(ours.entropy, trl_out.entropy, atol=1e-4)
    assert torch.equal(ours.is_top1, trl_out.is_top1)
    # masked positions are zeros, as in TRL's output
    assert (ours.log_probs[~ours.label_mask] == 0).all()
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_generation_forward_is_untouched(smollm2, real_batch):
    model = _trl_model(smollm2)
    add_gathered_lm_head(model)
    with torch.no_grad():
        plain = smollm2[0](input_ids=real_batch["input_ids"][:1, :32]).logits
        patched = model(input_ids=real_batch["input_ids"][:1, :32]).logits
    assert torch.equal(plain, patched)


@pytest.mark.slow
def test_trainable_layers_leave_frozen_weights_byte_identical(smollm2, real_batch):
    model = _trl_model(smollm2)
    add_gathered_lm_head(model)
    part = freeze_below_top_layers(model, 4)
    total = len(model.model.layers)
    assert part.layers == tuple(range(total - 4, total))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model.train()
    model(**real_batch, fused_lm_head=True).loss.backward()
    optimizer.step()
    trained_prefixes = tuple(f"model.layers.{i}." for i in part.layers) + ("model.norm.",)
    for name, p in model.named_parameters():
        if name.startswith(trained_prefixes):
            continue
        assert torch.equal(p.detach(), before[name]), name
        assert p.grad is None, name  # no backward below the lowest trained layer
    moved = model.model.layers[-1].self_attn.q_proj.weight
    assert not torch.equal(moved.detach(), before[f"model.layers.{total - 1}.self_attn.q_proj.weight"])


def test_trainable_layers_out_of_range_is_a_config_error(smollm2):
    with pytest.raises(ConfigError, match="decoder layers"):
        freeze_below_top_layers(copy.deepcopy(smollm2[0]), 999)


def test_lora_goes_on_the_trained_layers_only(smollm2):
    from peft import LoraConfig

    config = layer_limited_peft_config(LoraConfig(r=4, target_modules=["q_proj"]), smollm2[0], 3)
    total = len(smollm2[0].model.layers)
    assert list(config.layers_to_transform) == [total - 3, total - 2, total - 1]


def test_soft_capped_logits_are_refused(tiny_model):
    model, _ = tiny_model
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        add_gathered_lm_head(model)


@pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU has no bf16 in hardware (AVX512-BF16/AMX)")
@pytest.mark.slow
def test_bf16_autocast_gives_the_fp32_loss_within_bf16_rounding(smollm2, real_batch):
    """The fast path's bf16 autocast over fp32 weights (what `--bf16 true --use_cpu true` runs)
    keeps the gathered loss within bf16's ~3 significant digits of fp32's."""
    model = _trl_model(smollm2)
    add_gathered_lm_head(model)
    with torch.no_grad():
        fp32 = model(**real_batch, fused_lm_head=True).loss.item()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model(**real_batch, fused_lm_head=True).loss.item()
    assert bf16 != fp32  # the matmuls did run in bf16
    assert abs(bf16 - fp32) <= 0.02 * fp32


def test_print_fast_flags_are_the_recipes_own_flags():
    """`accelerate launch recipes/sft_executor.py $(python bench/cpu_fast_path.py --print_fast_flags)`:
    the printed line parses as the recipe's arguments and turns on every fast-path option."""
    import sys

    printed = run_script(
        [sys.executable, str(REPO / "bench" / "cpu_fast_path.py"), "--print_fast_flags"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed.count("\n") == 1
    sys.path.insert(0, str(REPO / "recipes"))
    try:
        import sft_executor
    finally:
        sys.path.remove(str(REPO / "recipes"))
    script_args, training_args, _ = sft_executor.parse_args(printed.split())
    assert script_args.gathered_loss and script_args.compile_layers
    assert training_args.optim == "adamw_torch_fused"
    assert training_args.bf16 == cpu_has_native_bf16()

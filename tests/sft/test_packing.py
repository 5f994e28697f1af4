"""Invariant 4: with packing, each sequence's loss equals its loss alone (no cross-attention)."""

from __future__ import annotations

import torch
from rowgen import make_rows
from trl import SFTConfig
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from executor_sft.sft import tokenize_example
from executor_sft.sft.train import ExecutorSFTTrainer, prepare_dataset


def _token_losses(logits, labels):
    return torch.nn.functional.cross_entropy(
        logits[0, :-1].float(), labels[0, 1:], reduction="none", ignore_index=-100
    )


def _per_sequence_losses(model, batch, examples, use_cache):
    with torch.no_grad():
        packed = _token_losses(model(**batch, use_cache=use_cache).logits, batch["labels"])
        alone, together, offset = [], [], 0
        for ex in examples:
            n = len(ex["input_ids"])
            ids, labels = torch.tensor([ex["input_ids"]]), torch.tensor([ex["labels"]])
            mask = labels[0, 1:] != -100
            alone.append(_token_losses(model(input_ids=ids, use_cache=False).logits, labels)[mask].mean())
            together.append(packed[offset : offset + n - 1][mask].mean())
            offset += n
    return torch.stack(together), torch.stack(alone)


def _packed_batch(tokenizer, n=3):
    examples = [tokenize_example(r, tokenizer) for r in make_rows(n, seed=11, passage_words=8)]
    batch = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=True)(examples)
    batch = {k: v for k, v in batch.items() if k in ("input_ids", "labels", "position_ids")}
    return examples, batch


def test_packed_loss_equals_separate_loss(tiny_model):
    model, tok = tiny_model
    model.eval()
    examples, batch = _packed_batch(tok)
    assert batch["input_ids"].shape[0] == 1 and (batch["position_ids"][0] == 0).sum() == len(examples)
    together, alone = _per_sequence_losses(model, batch, examples, use_cache=False)
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


def test_kv_cache_breaks_packing_isolation(tiny_model):
    """The caveat the trainer guards against: with a KV cache, packed sequences see each other."""
    model, tok = tiny_model
    model.eval()
    examples, batch = _packed_batch(tok)
    together, alone = _per_sequence_losses(model, batch, examples, use_cache=True)
    assert torch.allclose(together[0], alone[0], atol=1e-5)  # the first sequence has nothing before it
    assert (together[1:] - alone[1:]).abs().max() > 1e-5


def test_trainer_packs_with_isolation_even_if_config_says_use_cache(tiny_model, tmp_path):
    """The real training path: TRL bfd packing of our pre-tokenised rows, through our trainer."""
    model, tok = tiny_model
    model.config.use_cache = True  # what a Hub checkpoint usually says
    rows = make_rows(4, seed=21, passage_words=8)
    dataset, _ = prepare_dataset(rows, tok, max_length=4096, disable_progress=True)
    args = SFTConfig(
        output_dir=str(tmp_path),
        packing=True,
        max_length=4096,
        per_device_train_batch_size=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
    )
    trainer = ExecutorSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok)
    batch = next(iter(trainer.get_train_dataloader()))
    starts = (batch["position_ids"][0] == 0).sum().item()
    assert starts >= 2, "bfd should pack several rows into one 4096-token sequence"
    model.eval()
    with torch.no_grad():
        packed_loss = trainer.compute_loss(model, dict(batch))
    # token-weighted mean of each packed sequence's loss computed alone
    sums, count, pos = 0.0, 0, batch["position_ids"][0]
    bounds = [*(pos == 0).nonzero().flatten().tolist(), pos.numel()]
    for a, b in zip(bounds[:-1], bounds[1:], strict=False):
        ids, labels = batch["input_ids"][:, a:b], batch["labels"][:, a:b].clone()
        labels[0, 0] = -100
        with torch.no_grad():
            losses = _token_losses(model(input_ids=ids, use_cache=False).logits, labels)
        mask = labels[0, 1:] != -100
        sums += losses[mask].sum().item()
        count += int(mask.sum())
    assert abs(packed_loss.item() - sums / count) < 1e-4


def test_varlen_attention_isolates_packed_sequences(tiny_model):
    """The fast path's attention (CPU fallback here): same per-sequence losses, even with a cache."""
    from executor_sft.sft.varlen import register_varlen_attention

    model, tok = tiny_model
    model.eval()
    examples, batch = _packed_batch(tok)
    model.set_attn_implementation(register_varlen_attention())
    for use_cache in (False, True):
        together, alone = _per_sequence_losses(model, batch, examples, use_cache=use_cache)
        torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)

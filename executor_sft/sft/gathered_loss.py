"""The LM head only at trained positions: gather the hidden states of labelled tokens first.

TRL 1.16's SFTTrainer already scores tokens through a fused, chunked LM head
(`trl.trainer.utils.add_fused_lm_head`), but it drops the masked positions only on Triton devices:
on a CPU it projects every position through the vocabulary and zeroes the masked ones after. In
executor rows most tokens are retrieved passages that carry no loss (10.9% of `data/sft.jsonl`'s
tokens are trained under SmolLM2's tokenizer), so on a CPU that projection is mostly wasted.

`add_gathered_lm_head` re-patches the forward TRL patched: the same backbone call, the same
chunked kernel and the same `FusedCausalLMOutput`, with the hidden states gathered at the
labelled positions on every device. The loss and each per-token log-probability are TRL's to
float rounding (tests/sft/test_gathered_loss.py compares them on a real batch).
"""

from __future__ import annotations

import functools
import types

from trl.kernels import ChunkedLogProbFunction
from trl.trainer.utils import FusedCausalLMOutput

# The vocabulary tile width TRL gives the same kernel (trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE).
VOCAB_CHUNK = 32768
PER_TOKEN_OUTPUTS = ("log_probs", "entropy", "is_top1")
"""What SFTTrainer's metrics read (`entropy`, `mean_token_accuracy`)."""


def add_gathered_lm_head(model) -> None:
    """Make `model(..., labels=..., fused_lm_head=True)` project only labelled positions.

    Call on the model TRL patched (the base model under PEFT). Other calls (generation, the
    model's own loss) go to the forward it had. Models whose config scales or soft-caps logits
    are refused: the gathered path does not reproduce those transforms."""
    config = model.config.get_text_config()
    for attr in ("final_logit_softcapping", "logit_scale", "output_multiplier", "logits_scaling"):
        if getattr(config, attr, None) not in (None, 1.0):
            raise ValueError(f"gathered_loss: {config.model_type} sets {attr}; train without gathered_loss")
    if getattr(config, "output_router_logits", False):
        raise ValueError(f"gathered_loss: {config.model_type} is a routed (MoE) model; train without it")
    inner = model.forward

    @functools.wraps(type(model).forward)
    def forward(
        self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None, **kw
    ):
        if not fused_lm_head:
            return inner(
                *args, labels=labels, shift_labels=shift_labels, num_items_in_batch=num_items_in_batch, **kw
            )
        kw["use_cache"] = False
        hidden = self.base_model(*args, **kw).last_hidden_state
        if shift_labels is None:
            hidden, targets = hidden[:, :-1], labels[:, 1:]
        else:
            targets = shift_labels
        head = self.get_output_embeddings()
        targets = targets.to(head.weight.device)
        mask = targets != -100
        picked = ChunkedLogProbFunction.apply(
            hidden.to(head.weight.device)[mask],
            head.weight,
            head.bias,
            targets[mask],
            1.0,
            VOCAB_CHUNK,
            None,
            1.0,
            PER_TOKEN_OUTPUTS,
        )
        # masked_scatter keeps an all-masked micro-batch connected to the graph (a zero loss, not an error)
        log_probs, entropy, _, _, is_top1 = (
            None if x is None else x.new_zeros(mask.shape).masked_scatter(mask, x) for x in picked
        )
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(
            loss=-log_probs.sum() / count,
            log_probs=log_probs,
            entropy=entropy,
            is_top1=is_top1,
            label_mask=mask,
        )

    model.forward = types.MethodType(forward, model)

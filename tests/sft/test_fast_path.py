"""The GPU fast path's options, on CPU with the tiny Qwen3: each gives the loss of the plain path on
the same packed batch, and packed rows stay isolated.

- Logits only at trained positions are TRL's own (`trl/trainer/utils.py::add_fused_lm_head`): on
  CUDA/XPU with Triton the LM head projects only the positions whose next-token label is not
  -100; on CPU TRL projects every position. The tests force TRL's CUDA choice on CPU to show the
  rows it projects and that the loss is the same.
- `compile_layers` (`executor_sft.sft.compile`): torch.compile per decoder layer.
- `use_liger_kernel`: TRL's SFTConfig field, passed through as is.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
import trl.trainer.utils as trl_utils
from rowgen import make_rows, write_jsonl
from trl import ModelConfig, SFTConfig

from executor_sft.llm.offline import tiny_qwen3
from executor_sft.sft import train as train_module
from executor_sft.sft.compile import compile_decoder_layers, decoder_layers, eager_decoder_layers
from executor_sft.sft.train import ExecutorSFTTrainer, SFTScriptArguments, prepare_dataset, train_executor
from executor_sft.sft.varlen import register_varlen_attention

REPO = Path(__file__).resolve().parents[2]
LOSS_ATOL = 1e-4  # fp32, same batch: option on vs off


def compiled_layer_count(model) -> int:
    """How many decoder layers carry a compiled forward."""
    return sum(getattr(m, "_compiled_call_impl", None) is not None for m in decoder_layers(model))


def _args(tmp_path, **overrides) -> SFTConfig:
    values = dict(
        output_dir=str(tmp_path / "out"),
        packing=True,
        max_length=4096,
        per_device_train_batch_size=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        dataloader_pin_memory=False,
        seed=0,
    )
    return SFTConfig(**{**values, **overrides})


def _trainer(tmp_path, model, tok, **kwargs) -> ExecutorSFTTrainer:
    dataset, _ = prepare_dataset(make_rows(4, seed=21, passage_words=8), tok, 4096, disable_progress=True)
    return ExecutorSFTTrainer(
        model=model, args=_args(tmp_path), train_dataset=dataset, processing_class=tok, **kwargs
    )


def _varlen_model():
    model, tok = tiny_qwen3()
    model.set_attn_implementation(register_varlen_attention())
    return model, tok


def _loss_and_grad(trainer, batch) -> tuple[float, torch.Tensor]:
    """Training-mode loss of one batch and the gradient of the (tied) LM head."""
    model = trainer.model
    model.train()
    model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    return loss.item(), model.get_output_embeddings().weight.grad.detach().clone()


def _reference_loss(model, batch) -> float:
    """Token-mean cross-entropy from the full logits of the model's original forward."""
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}, use_cache=False).logits
    labels = batch["labels"][0, 1:]
    return torch.nn.functional.cross_entropy(logits[0, :-1].float(), labels, ignore_index=-100).item()


class _RowCounter:
    """Wraps TRL's chunked log-prob function to record how many rows reach the LM head."""

    def __init__(self, fn):
        self.fn, self.rows = fn, []

    def apply(self, hidden, *args):
        self.rows.append(hidden.shape[0])
        return self.fn.apply(hidden, *args)


def _projected_rows(monkeypatch, trainer, batch, *, compact: bool) -> tuple[list[int], float]:
    counter = _RowCounter(trl_utils._ChunkedLogProbFunction)
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", counter)
    monkeypatch.setattr(trl_utils, "_use_triton", lambda device: compact)
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, dict(batch)).item()
    monkeypatch.undo()
    return counter.rows, loss


def test_trl_projects_only_trained_positions_on_its_gpu_path(tmp_path, monkeypatch):
    model, tok = tiny_qwen3()
    trainer = _trainer(tmp_path, model, tok)
    batch = next(iter(trainer.get_train_dataloader()))
    trained = int((batch["labels"][:, 1:] != -100).sum())
    positions = batch["labels"][:, 1:].numel()
    assert 0 < trained < positions / 2

    gpu_rows, gpu_loss = _projected_rows(monkeypatch, trainer, batch, compact=True)
    cpu_rows, cpu_loss = _projected_rows(monkeypatch, trainer, batch, compact=False)
    assert gpu_rows == [trained], "TRL's CUDA/XPU path projects only positions with a trained label"
    assert cpu_rows == [positions], "TRL's CPU path projects every position"
    assert abs(gpu_loss - cpu_loss) < 1e-6
    assert abs(gpu_loss - _reference_loss(model, batch)) < LOSS_ATOL


def test_trained_positions_only_gives_the_same_gradient(tmp_path, monkeypatch):
    model, tok = tiny_qwen3()
    trainer = _trainer(tmp_path, model, tok)
    batch = next(iter(trainer.get_train_dataloader()))
    monkeypatch.setattr(trl_utils, "_use_triton", lambda device: True)
    compact_loss, compact_grad = _loss_and_grad(trainer, batch)
    monkeypatch.setattr(trl_utils, "_use_triton", lambda device: False)
    full_loss, full_grad = _loss_and_grad(trainer, batch)
    assert abs(compact_loss - full_loss) < LOSS_ATOL
    torch.testing.assert_close(compact_grad, full_grad, atol=1e-6, rtol=1e-4)


@pytest.mark.slow
def test_compile_layers_keeps_the_loss_and_packed_isolation(tmp_path):
    """Per-layer compile (inductor, CPU) vs eager on the same packed batch, varlen attention."""
    eager_model, tok = _varlen_model()
    compiled_model = copy.deepcopy(eager_model)
    eager = _trainer(tmp_path / "eager", eager_model, tok)
    compiled = _trainer(tmp_path / "compiled", compiled_model, tok, compile_layers=True)
    assert compiled_layer_count(compiled.model) == 2 and compiled_layer_count(eager.model) == 0
    batch = next(iter(eager.get_train_dataloader()))
    assert (batch["position_ids"][0] == 0).sum() >= 2, "the batch must pack several rows"

    eager_loss, eager_grad = _loss_and_grad(eager, batch)
    compiled_loss, compiled_grad = _loss_and_grad(compiled, batch)
    assert abs(eager_loss - compiled_loss) < LOSS_ATOL
    torch.testing.assert_close(compiled_grad, eager_grad, atol=1e-5, rtol=1e-3)

    compiled.model.eval()
    pos = batch["position_ids"][0]
    bounds = [*(pos == 0).nonzero().flatten().tolist(), pos.numel()]
    with torch.no_grad():
        logits = compiled.model(**{k: v for k, v in batch.items() if k != "labels"}, use_cache=False).logits
        for a, b in zip(bounds[:-1], bounds[1:], strict=False):
            alone = compiled.model(input_ids=batch["input_ids"][:, a:b], use_cache=False).logits
            torch.testing.assert_close(logits[:, a:b], alone, atol=LOSS_ATOL, rtol=1e-4)


def test_eager_decoder_layers_runs_compiled_layers_eagerly_inside_only():
    """The probe's context: inside, no compiled forward runs (so no graph is compiled for a
    KV-cache pass); after it, the layers are compiled again."""
    model, _ = tiny_qwen3()
    compile_decoder_layers(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad(), eager_decoder_layers(model):
        assert compiled_layer_count(model) == 0
        cached = model(input_ids=ids, use_cache=True).past_key_values
        assert cached.get_seq_length() == 4
    assert compiled_layer_count(model) == len(decoder_layers(model))


def _capture_trainer(monkeypatch) -> dict:
    """Replace the trainer class in train_executor by one that records its arguments and stops."""
    seen: dict = {}

    class Stop(Exception):
        pass

    def fake(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(train_module, "ExecutorSFTTrainer", fake)
    seen["stop"] = Stop
    return seen


def test_train_executor_passes_the_options_through(tmp_path, monkeypatch):
    data = write_jsonl(tmp_path / "sft.jsonl", make_rows(2, seed=3, passage_words=5))
    seen = _capture_trainer(monkeypatch)
    args = _args(tmp_path, use_liger_kernel=True, liger_kernel_config={"rms_norm": True})
    with pytest.raises(seen["stop"]):
        train_executor(
            SFTScriptArguments(dataset_name=str(data), compile_layers=True),
            args,
            ModelConfig("offline:tiny-qwen3", attn_implementation="executor_varlen"),
        )
    assert seen["compile_layers"] is True
    assert seen["args"].use_liger_kernel is True and seen["args"].liger_kernel_config == {"rms_norm": True}
    assert (
        '"compile_layers": true' in seen["card_section"]
        and '"use_liger_kernel": true' in seen["card_section"]
    )
    untouched = {f.name for f in dataclasses.fields(args)} - {"assistant_only_loss", "completion_only_loss"}
    assert all(getattr(seen["args"], n) == getattr(args, n) for n in untouched)


def test_liger_kernel_reaches_the_trainer(tmp_path):
    """With liger installed (a GPU extra), TRL applies its layer kernels and keeps its own fused LM head."""
    pytest.importorskip("liger_kernel")
    model, tok = tiny_qwen3()
    dataset, _ = prepare_dataset(make_rows(2, seed=3), tok, 4096, disable_progress=True)
    trainer = ExecutorSFTTrainer(
        model=model,
        args=_args(tmp_path, use_liger_kernel=True),
        train_dataset=dataset,
        processing_class=tok,
    )
    assert trainer.args.use_liger_kernel is True
    assert trainer.args.liger_kernel_config["fused_linear_cross_entropy"] is False


def test_fast_config_turns_the_options_on():
    from test_sft_train import _recipe

    script, args, model = _recipe().parse_args(
        ["--config", str(REPO / "recipes/configs/sft_qwen3_1.7b_fast.yaml"), "--bf16", "false"]
    )
    assert script.compile_layers is True
    assert args.packing is True and args.gradient_checkpointing is False
    assert model.attn_implementation == "executor_varlen" and model.dtype == "bfloat16"
    assert args.use_liger_kernel is False
    assert args.max_length >= 6144

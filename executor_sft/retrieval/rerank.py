"""Rerank stages: take the top-N candidates of the stage below, rescore them, keep the best k.

A stage is a retriever kind of its own (`cross_encoder`, `llm_rerank`, `dense_rescore` in
`kinds.RETRIEVERS`) that loads the kind below it (`over`, default bm25) from the same index,
so a reranked configuration is one `RetrieverConfig`:

    kind: llm_rerank
    options: {over: hybrid, rerank: {model: Qwen/Qwen3-Reranker-4B, top_n: 50, window: 512}}

Documents longer than the scorer's window (query and template included) are cut into chunks
that fit; a document scores as its best chunk, and the hit it returns holds that chunk (what
the agent reads is the part the scorer judged).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from executor_sft.errors import ConfigError
from executor_sft.retrieval.base import Hit, Retriever
from executor_sft.retrieval.scorers import Scorer

DEFAULT_TOP_N = 50
"""Candidates a stage rescores (the search-agent blog's default depth, "Search Tool Optimization")."""


class RerankSettings(BaseModel):
    """The `rerank:` option of a rerank kind. Unset `window` / `batch_size` take the scorer's defaults."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    """Hub id, local directory or `offline:` alias (the dense re-scorer defaults to minilm)."""
    top_n: int = Field(DEFAULT_TOP_N, ge=1)
    batch_size: int | None = Field(None, ge=1)
    window: int | None = Field(None, ge=16)
    """Most tokens one (query, passage) pair may take; longer passages are chunked to fit."""
    device: str | None = None
    instruction: str | None = None
    """The yes/no LLM's task line (default: Qwen3's web-search instruction)."""
    url: str | None = None
    """A rerank server (`POST {url}/rerank`, e.g. vLLM's `.../v1`) instead of a local model."""
    tokenizer: str | None = None
    """With `url`: the tokenizer to chunk with, when it is not `model`'s."""
    api_key_env: str | None = None

    def scorer_kwargs(self) -> dict[str, Any]:
        return {
            k: v for k, v in {"window": self.window, "batch_size": self.batch_size}.items() if v is not None
        }


class RerankRetriever(Retriever):
    """Rescores the stage below's top `top_n` hits per query with `scorer` and keeps the best k."""

    def __init__(self, inner: Retriever, scorer: Scorer, top_n: int = DEFAULT_TOP_N, name: str = "rerank"):
        self.inner, self.scorer, self.top_n = inner, scorer, top_n
        self.index_id = f"{name}({scorer.name};n{top_n};w{scorer.window})/{inner.index_id}"

    def documents(self, doc_ids: list[str]) -> list[Hit | None]:
        return self.retriever.documents(doc_ids)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        candidates = self.inner.search(list(queries), max(k, self.top_n))
        pairs: list[tuple[str, str]] = []
        owners: list[tuple[int, int]] = []  # (query position, hit position) of each pair
        for qi, (query, hits) in enumerate(zip(queries, candidates, strict=True)):
            for hi, hit in enumerate(hits):
                for chunk in self.scorer.chunks(query, hit.title, hit.text):
                    pairs.append((query, chunk))
                    owners.append((qi, hi))
        scores = self.scorer.score_pairs(pairs)
        best: list[dict[int, tuple[float, str]]] = [{} for _ in queries]
        for (qi, hi), (_, chunk), score in zip(owners, pairs, scores, strict=True):
            if hi not in best[qi] or score > best[qi][hi][0]:
                best[qi][hi] = (score, chunk)
        return [self._top(hits, best[qi], k) for qi, hits in enumerate(candidates)]

    @staticmethod
    def _top(hits: list[Hit], best: dict[int, tuple[float, str]], k: int) -> list[Hit]:
        order = sorted(best, key=lambda i: (-best[i][0], i))[:k]
        out = []
        for i in order:
            score, chunk = best[i]
            title = hits[i].title
            text = chunk[len(title) + 1 :] if title and chunk.startswith(f"{title}\n") else chunk
            out.append(Hit(hits[i].doc_id, title, text, score))
        return out


def rerank_settings(options: dict[str, Any], kind: str) -> RerankSettings:
    raw = options.pop("rerank", {})
    try:
        return RerankSettings.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{kind} retriever: options.rerank.{where}: {err['msg']}") from None


def _require_model(s: RerankSettings, kind: str, example: str) -> None:
    if s.model is None:
        raise ConfigError(f"{kind} retriever: options.rerank.model is required (e.g. {example})")


def cross_encoder_scorer(s: RerankSettings) -> Scorer:
    from executor_sft.retrieval.scorers import CrossEncoderScorer, RemoteRerankScorer

    _require_model(s, "cross_encoder", "BAAI/bge-reranker-v2-m3")
    if s.url:
        return RemoteRerankScorer(s.url, s.model, "plain", tokenizer=s.tokenizer, api_key_env=s.api_key_env,
                                  **s.scorer_kwargs())  # fmt: skip
    return CrossEncoderScorer(s.model, device=s.device, **s.scorer_kwargs())


def llm_yes_no_scorer(s: RerankSettings) -> Scorer:
    from executor_sft.retrieval.scorers import RemoteRerankScorer, YesNoLLMScorer

    _require_model(s, "llm_rerank", "Qwen/Qwen3-Reranker-4B")
    if s.url:
        return RemoteRerankScorer(s.url, s.model, "yes_no", tokenizer=s.tokenizer, instruction=s.instruction,
                                  api_key_env=s.api_key_env, **s.scorer_kwargs())  # fmt: skip
    return YesNoLLMScorer(s.model, device=s.device, instruction=s.instruction, **s.scorer_kwargs())


def dense_scorer(s: RerankSettings) -> Scorer:
    from executor_sft.retrieval.scorers import DenseScorer

    if s.url:
        raise ConfigError("dense_rescore retriever: options.rerank.url is not supported (embeds locally)")
    return DenseScorer(s.model or "minilm", device=s.device, **s.scorer_kwargs())

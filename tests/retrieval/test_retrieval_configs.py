"""The blog-shaped retrieval configs: GPU ones validate offline, the minibench equivalents run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor_sft.configfile import load_config
from executor_sft.errors import ConfigError
from executor_sft.retrieval import RerankRetriever, build_retriever
from executor_sft.retrieval.config import RetrieverConfig
from executor_sft.retrieval.rerank import RerankSettings

CONFIGS = Path(__file__).resolve().parents[2] / "recipes" / "configs"

GPU = {
    "retrieval_fast.yaml": ("cross_encoder", "BAAI/bge-reranker-v2-m3", 50, "indexes/wiki-512"),
    "retrieval_strong.yaml": ("llm_rerank", "Qwen/Qwen3-Reranker-4B", 50, "indexes/wiki-512"),
    "retrieval_max.yaml": ("llm_rerank", "Qwen/Qwen3-Reranker-4B", 200, "indexes/wiki-4096"),
}
OFFLINE = {
    "retrieval_minibench_fast.yaml": ("dense_rescore", "minilm", 50),
    "retrieval_minibench_strong.yaml": ("llm_rerank", "offline:smollm2", 20),
    "retrieval_minibench_max.yaml": ("llm_rerank", "offline:smollm2", 50),
}

SEARCH_TOP_N = 10


@pytest.mark.parametrize("name", sorted(GPU))
def test_gpu_configs_validate_offline(name):
    cfg = load_config(RetrieverConfig, CONFIGS / name)
    kind, model, top_n, index = GPU[name]
    settings = RerankSettings.model_validate(cfg.options["rerank"])
    assert (cfg.kind, settings.model, settings.top_n, cfg.index) == (kind, model, top_n, index)
    assert cfg.options["over"] == "hybrid" and cfg.options["depth"] >= settings.top_n and cfg.k == 5


def test_a_typo_in_a_rerank_option_fails_when_the_config_is_read(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS / "retrieval_strong.yaml").read_text().replace("top_n:", "topn:"))
    with pytest.raises(ConfigError, match=r"bad.yaml.*options.rerank.topn: Extra inputs"):
        load_config(RetrieverConfig, bad)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_offline_minibench_configs_run_over_a_real_index(name, subset_index, subset_questions):
    cfg = load_config(RetrieverConfig, CONFIGS / name, overrides={"index": str(subset_index)})
    kind, model, top_n = OFFLINE[name]
    r = build_retriever(cfg.model_copy(update={"cache": cfg.cache.model_copy(update={"enabled": False})}))
    assert isinstance(r, RerankRetriever) and r.index_id.startswith(f"{kind}({model};n{top_n};")
    assert r.inner.index_id.startswith("weighted(")  # the hybrid below
    # The configured depth and window are checked above (index_id); the search checks the stack's
    # plumbing, which reranking 10 passages does as well as 50 (SmolLM2 on CPU: ~5 s a passage).
    r.top_n = min(r.top_n, SEARCH_TOP_N)
    (hits,) = r.search([subset_questions[0]["question"]], cfg.k)
    assert len(hits) == 5 and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

"""End-to-end pipelines on the synthetic world, above every stage they run.

- `sample_data`: world -> BM25 -> scripted collection -> filter: the committed `data/`.
- `demo`: the same with a real SmolLM2 student, then SFT and before/after evaluation.
- `eval_demo`: an evaluation sweep over scripted and tiny real models (figures for docs/eval.md).
"""
